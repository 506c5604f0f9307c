"""A persistent pool of worker threads for compiled programs' parallel loops.

Generated code calls `fg_parallel_for(chunk, table, start, stop, threads)` (the signature of
the per-module `parallel_for` it replaces): the loop's iterations are split into at most
`threads` contiguous chunks, which the calling thread and the pool's workers claim one by one
and run. Starting a POSIX thread costs tens to hundreds of microseconds (a sleeping core must
wake), as much as a small kernel; the pool's workers are started once and, after a job, spin
for about 50 µs before they sleep on a futex, so the kernels of one program, and programs
called back to back, find them awake.

The pool is written in LLVM IR, compiled once per process into its own module (needing no C
compiler and no OpenMP runtime), and made known to LLVM under `fg_parallel_for`.

- A job is published by writing its fields, then `next = n << 32` (release): each claim is
  one `fetch_add` on `next`, whose high half says how many chunks the job has, so a worker
  that claims after the job ran out sees an index past the count and claims nothing, whatever
  job comes next. `remaining` counts the chunks not finished; the caller returns when it is 0.
- Workers sleep on `signal`, which each job increments; `sleepers` counts the workers about
  to sleep or asleep, so a job makes the wake-up system call only when one is.
- One job at a time: a caller that finds the pool busy (several pmap devices at once) starts
  threads of its own, as before the pool. So does a process whose pool cannot be started.
- After `fork`, the child's pool has no workers (threads do not survive a fork): a call in a
  process other than the one that started the workers starts new ones.
- At exit, `stop` makes the workers leave their loop before the interpreter frees the code
  they run.

Linux only (the futex); elsewhere generated code starts threads per loop.
"""

from __future__ import annotations

import atexit
import ctypes
import platform
import sys

import llvmlite.binding as llvm

from funcgrad.once import once

SYMBOL = "fg_parallel_for"
MAX_WORKERS = 255
# Spins of a worker looking for the next job before it sleeps: about 50 µs of pause
# instructions.
SPINS = 2048
_FUTEX = {"x86_64": 202, "aarch64": 98}
# The spin-wait hint: x86's pause, Arm's yield (hint #1).
_PAUSE = {
    "x86_64": ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"),
    "aarch64": ("declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"),
}


def available() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in _FUTEX


@once
def install():
    """Compile the pool once per process, register `fg_parallel_for` with LLVM and its
    workers' stop with `atexit` (the returned module must stay alive: it holds the code)."""
    from funcgrad.backends.llvm import engine, render

    machine = platform.machine()
    text = _POOL.format(
        futex=_FUTEX[machine],
        pause_declaration=_PAUSE[machine][0],
        pause=_PAUSE[machine][1],
        spins=SPINS,
        max_workers=MAX_WORKERS,
        spawned=render.PARALLEL_FOR.replace("@parallel_for(", "@spawned(", 1),
    )
    compiled = engine.Compiled([text])
    llvm.add_symbol(SYMBOL, compiled.entry_address)
    with engine.lock:
        stop = ctypes.CFUNCTYPE(None)(compiled.engine.get_function_address("stop"))
    atexit.register(stop)
    return compiled, stop


_POOL = """
%job = type {{ ptr, ptr, i64, i64 }}
@job = internal global %job zeroinitializer
@next = internal global i64 0, align 64
@remaining = internal global i64 0, align 64
@signal = internal global i32 0, align 64
@sleepers = internal global i32 0
@busy = internal global i32 0
@workers = internal global i64 0
@owner = internal global i32 0
@quit = internal global i32 0
@alive = internal global i64 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @pthread_detach(i64)
declare i32 @getpid()
declare i64 @syscall(i64, ...)
declare i32 @usleep(i32)

attributes #0 = {{ nounwind "frame-pointer"="none" }}
attributes #1 = {{ nounwind minsize optsize "frame-pointer"="none" }}

{spawned}

{pause_declaration}

define internal void @pause() #0 {{
entry:
  {pause}
  ret void
}}

; Claim chunks of the current job and run them until none is left.
define internal void @work() #0 {{
entry:
  %task = alloca {{ ptr, i64, i64 }}
  br label %claim
claim:
  %word = atomicrmw add ptr @next, i64 1 acq_rel
  %i = and i64 %word, 4294967295
  %n = lshr i64 %word, 32
  %more = icmp ult i64 %i, %n
  br i1 %more, label %run, label %done
run:
  %chunk = load ptr, ptr @job
  %table.at = getelementptr %job, ptr @job, i32 0, i32 1
  %table = load ptr, ptr %table.at
  %start.at = getelementptr %job, ptr @job, i32 0, i32 2
  %start = load i64, ptr %start.at
  %count.at = getelementptr %job, ptr @job, i32 0, i32 3
  %count = load i64, ptr %count.at
  call void @chunk_bounds(ptr %task, ptr %table, i64 %start, i64 %count, i64 %i, i64 %n)
  %ignored = call ptr %chunk(ptr %task)
  %left = atomicrmw sub ptr @remaining, i64 1 release
  br label %claim
done:
  ret void
}}

define internal ptr @worker(ptr %unused) #0 {{
entry:
  %first = load atomic i32, ptr @signal seq_cst, align 4
  br label %wait
wait:
  %seen = phi i32 [ %first, %entry ], [ %now, %got ], [ %seen, %slept ]
  %stopping = load atomic i32, ptr @quit acquire, align 4
  %leave = icmp ne i32 %stopping, 0
  br i1 %leave, label %exit, label %spin
exit:
  %gone = atomicrmw sub ptr @alive, i64 1 release
  ret ptr null
spin:
  %spun = phi i32 [ 0, %wait ], [ %spun.next, %again ]
  %now = load atomic i32, ptr @signal acquire, align 4
  %new = icmp ne i32 %now, %seen
  br i1 %new, label %got, label %again
again:
  call void @pause()
  %spun.next = add i32 %spun, 1
  %tired = icmp sge i32 %spun.next, {spins}
  br i1 %tired, label %sleep, label %spin
sleep:
  %s0 = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %still = load atomic i32, ptr @signal seq_cst, align 4
  %same = icmp eq i32 %still, %seen
  br i1 %same, label %futex, label %woke
futex:
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr @signal, i32 128, i32 %seen, ptr null)
  br label %woke
woke:
  %s1 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %wait
got:
  call void @work()
  br label %wait
}}

; fg_parallel_for(chunk, table, start, stop, threads)
define void @entry(ptr %chunk, ptr %table, i64 %start, i64 %stop, i64 %threads) #0 {{
entry:
  %handle = alloca i64
  %count = sub i64 %stop, %start
  %few = icmp slt i64 %threads, 1
  %t = select i1 %few, i64 1, i64 %threads
  %over = icmp sgt i64 %t, %count
  %n = select i1 %over, i64 %count, i64 %t
  %alone = icmp sle i64 %n, 1
  br i1 %alone, label %spawn, label %lock
lock:
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %locked = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %locked, label %owned, label %spawn
owned:
  %pid = call i32 @getpid()
  %owner = load i32, ptr @owner
  %forked = icmp ne i32 %pid, %owner
  br i1 %forked, label %adopt, label %grow
adopt:
  store i32 %pid, ptr @owner
  store i64 0, ptr @workers
  store atomic i64 0, ptr @alive seq_cst, align 8
  br label %grow
grow:
  %have = load i64, ptr @workers
  %want.all = sub i64 %n, 1
  %cap = icmp sgt i64 %want.all, {max_workers}
  %want = select i1 %cap, i64 {max_workers}, i64 %want.all
  %short = icmp slt i64 %have, %want
  br i1 %short, label %start.worker, label %publish
start.worker:
  %rc = call i32 @pthread_create(ptr %handle, ptr null, ptr @worker, ptr null)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %publish
started:
  %born = atomicrmw add ptr @alive, i64 1 seq_cst
  %h = load i64, ptr %handle
  %d = call i32 @pthread_detach(i64 %h)
  %have.next = add i64 %have, 1
  store i64 %have.next, ptr @workers
  br label %grow
publish:
  %workers = load i64, ptr @workers
  %none = icmp eq i64 %workers, 0
  br i1 %none, label %unlock.spawn, label %post
unlock.spawn:
  store atomic i32 0, ptr @busy release, align 4
  br label %spawn
post:
  store ptr %chunk, ptr @job
  %table.at = getelementptr %job, ptr @job, i32 0, i32 1
  store ptr %table, ptr %table.at
  %start.at = getelementptr %job, ptr @job, i32 0, i32 2
  store i64 %start, ptr %start.at
  %count.at = getelementptr %job, ptr @job, i32 0, i32 3
  store i64 %count, ptr %count.at
  store atomic i64 %n, ptr @remaining release, align 8
  %word = shl i64 %n, 32
  store atomic i64 %word, ptr @next release, align 8
  %s = atomicrmw add ptr @signal, i32 1 seq_cst
  %asleep = load atomic i32, ptr @sleepers seq_cst, align 4
  %any = icmp sgt i32 %asleep, 0
  br i1 %any, label %wake, label %share
wake:
  %w = call i64 (i64, ...) @syscall(i64 {futex}, ptr @signal, i32 129, i32 2147483647)
  br label %share
share:
  call void @work()
  br label %finish
finish:
  %left = load atomic i64, ptr @remaining acquire, align 8
  %over.all = icmp eq i64 %left, 0
  br i1 %over.all, label %unlock, label %hold
hold:
  call void @pause()
  br label %finish
unlock:
  store atomic i32 0, ptr @busy release, align 4
  ret void
spawn:
  call void @spawned(ptr %chunk, ptr %table, i64 %start, i64 %stop, i64 %threads)
  ret void
}}

; At exit: the workers leave their loop (waiting at most about a second for them), so none
; runs this module's code while the interpreter frees it.
define void @stop() #0 {{
entry:
  store atomic i32 1, ptr @quit seq_cst, align 4
  %s = atomicrmw add ptr @signal, i32 1 seq_cst
  %w = call i64 (i64, ...) @syscall(i64 {futex}, ptr @signal, i32 129, i32 2147483647)
  br label %check
check:
  %tries = phi i32 [ 0, %entry ], [ %tries.next, %again ]
  %left = load atomic i64, ptr @alive acquire, align 8
  %none = icmp sle i64 %left, 0
  %late = icmp sge i32 %tries, 1000
  %done = or i1 %none, %late
  br i1 %done, label %out, label %again
again:
  %slept = call i32 @usleep(i32 1000)
  %tries.next = add i32 %tries, 1
  br label %check
out:
  ret void
}}
"""
