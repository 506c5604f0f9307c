"""funcgrad.optim.contrib: newer optimizers, with the names, signatures and update equations
of Optax's `contrib`: learning-rate-free methods (`prodigy`, `dadapt_adamw`, `mechanize`,
`cocob`, `dog`, `dowg`, `momo`), schedule-free training (`schedule_free_adamw`, ...), `sam`,
`muon`, `galore`, `adopt`, `ademamix`, `acprop`, `madgrad`, `sophia`, `reduce_on_plateau`,
DP-SGD (`dpsgd`) and `split_real_and_imaginary` for complex parameters."""

from funcgrad.optim.contrib.adam_like import (
    ScaleByAdemamixState,
    ScaleBySimplifiedAdEMAMixState,
    acprop,
    ademamix,
    adopt,
    scale_by_acprop,
    scale_by_ademamix,
    scale_by_adopt,
    scale_by_simplified_ademamix,
    simplified_ademamix,
)
from funcgrad.optim.contrib.cocob import COCOBState, cocob, scale_by_cocob
from funcgrad.optim.contrib.complex_valued import (
    SplitRealAndImaginaryState,
    split_real_and_imaginary,
)
from funcgrad.optim.contrib.dadapt import (
    DAdaptAdamWState,
    ProdigyState,
    dadapt_adamw,
    prodigy,
)
from funcgrad.optim.contrib.dog import (
    DoGState,
    DoWGState,
    dog,
    dowg,
    scale_by_dog,
    scale_by_dowg,
)
from funcgrad.optim.contrib.galore import (
    GaLoreDimensionNumbers,
    GaLoreState,
    galore,
    scale_by_galore,
)
from funcgrad.optim.contrib.madgrad import MadgradState, madgrad, scale_by_madgrad
from funcgrad.optim.contrib.mechanic import MechanicState, mechanize
from funcgrad.optim.contrib.momo import MomoAdamState, MomoState, momo, momo_adam
from funcgrad.optim.contrib.muon import (
    MuonDimensionNumbers,
    MuonState,
    muon,
    orthogonalize_via_newton_schulz,
    scale_by_muon,
    scale_by_shape,
)
from funcgrad.optim.contrib.privacy import (
    DifferentiallyPrivateAggregateState,
    differentially_private_aggregate,
    dpsgd,
)
from funcgrad.optim.contrib.reduce_on_plateau import ReduceLROnPlateauState, reduce_on_plateau
from funcgrad.optim.contrib.sam import NormalizeState, SAMState, normalize, sam
from funcgrad.optim.contrib.schedule_free import (
    ScheduleFreeState,
    schedule_free,
    schedule_free_adamw,
    schedule_free_eval_params,
    schedule_free_sgd,
)
from funcgrad.optim.contrib.sophia import (
    HutchinsonState,
    SophiaState,
    hutchinson_estimator_diag_hessian,
    scale_by_sophia,
    sophia,
)
