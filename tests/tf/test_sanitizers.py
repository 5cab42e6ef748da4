"""The extension under AddressSanitizer and ThreadSanitizer, in real TensorFlow processes.

`make sanitize` (run by `make test` through this file) builds libgeryon_rendezvous with -fsanitize=address
and with -fsanitize=thread, and runs a subset of tests/tf against each in a pytest of its own whose
processes preload the sanitizer's runtime (geryon.tf.sanitizers). The subset covers what the data plane
does with its threads and buffers: pulls and pushes of mixed sizes (inline responses and the writer
thread, strings as TensorProto), an aborted receive, a PS killed mid-training, a map_table swap between
steps and a flow cut mid-tensor. Any report whose access is in our library fails the test (the
triage table, geryon.tf.sanitizers.triage_table, is printed with it); reports only in TensorFlow's
or Python's own code are listed, not failed (they are not ours to fix, and native/sanitizers/*.supp
silences the known ones). Handoffs of our objects through TF's uninstrumented locks are annotated
(native/rendezvous/tsan.h), not suppressed: see native/rendezvous/README.md, "Sanitizers", for the
triage. `make sanitize-long` runs all of tests/tf so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tf.tf_cluster import TfCluster

from geryon.tf import sanitizers
from geryon.tf.build import BuildError, build, compiler_file, plan, sanitizer_runtime

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]

# The representative subset: 8 min under ASAN measured once (15:26, with the TSAN run beside it on a
# shared 2-core machine at load ~10), over the ~5 min CI budget; see README, Sanitizers.
SUBSET = [
    "tests/tf/test_sanitizers.py::test_pulls_and_pushes_of_mixed_sizes_round_trip",
    "tests/tf/test_faults.py::test_tf1_between_graph_runs_and_an_aborted_step_leaves_the_rendezvous_usable",
    "tests/tf/test_faults.py::test_killing_the_ps_mid_training_fails_the_chief_within_10_s",
    "tests/tf/test_threshold_change.py::test_the_threshold_moves_the_big_layer_to_class_0",
    "tests/tf/test_transport.py::test_a_flow_cut_mid_tensor_fails_that_receive_at_once_and_the_next_step_redials",
    # issue 16: the producer's step abort (loop thread, TF's Env thread, the response racing it)
    "tests/tf/test_producer_abort.py::test_the_producer_aborts_a_step_whose_consumer_went_away_or_cancelled",
    # issue 16: a forgotten task's connections closed (TF's cache-destroying thread posts to the loop)
    "tests/tf/test_session_end.py::test_a_task_named_only_by_an_ended_session_is_refused_again",
    # issue 16: the producer's write pass on the loop (partial sends, EPOLLOUT; a slow consumer, a fast one)
    "tests/tf/test_loop_writes.py::test_a_consumer_that_reads_slowly_does_not_hold_up_another_connection",
]

# What `make test` runs under each sanitizer: a test each of the threads and buffers of a round trip, an
# aborted receive, a flow cut mid-tensor and the write pass; `make sanitize` (GERYON_SANITIZE_FULL=1)
# runs the whole subset. The two runs cost 21 of the 96 minutes of `make test` (2026-12-02, shared
# machine), the TSAN one's verdict is advisory (xfail below), and the four left out repeat the paths
# of these four from other callers (a killed PS, a map_table swap, an ended session, a producer abort).
CORE = [SUBSET[0], SUBSET[1], SUBSET[4], SUBSET[7]]


def chosen() -> list[str]:
    return SUBSET if os.environ.get("GERYON_SANITIZE_FULL") == "1" else CORE


# TF1 between-graph: variables of 1 KiB, 256 KiB and 8 MiB (inline responses up to 64 KiB, the writer
# thread above) and a string (a TensorProto response) on the PS; the worker pulls each, adds one and
# pushes it back; all four travel in the same step, concurrently.
MIXED_BODY = r"""
tf.compat.v1.disable_eager_execution()
sizes = [256, 64 << 10, 2 << 20]
with tf.device("/job:ps/task:0"):
    vs = [tf.compat.v1.get_variable(f"v{n}", initializer=tf.zeros([n])) for n in sizes]
    text = tf.compat.v1.get_variable("s", initializer=tf.constant(["x" * 100000, "y"]), dtype=tf.string)
with tf.device("/job:worker/task:0"):
    pushed = [v + 1.0 for v in vs]
    length = tf.reduce_sum(tf.strings.length(text))
with tf.device("/job:ps/task:0"):
    updates = tf.group(*[v.assign(p) for v, p in zip(vs, pushed)])
with tf.device("/job:worker/task:0"):
    sums = [tf.reduce_sum(v) for v in vs]
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
target = "grpc://" + cluster_spec.task_address("worker", 0)
with tf.compat.v1.Session(target, config=config) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    lengths = []
    for _ in range(ARGS["steps"]):
        _, n = sess.run([updates, length])
        lengths.append(int(n))
    totals = [float(x) for x in sess.run(sums)]
emit({"totals": totals, "lengths": lengths, "sizes": sizes})
"""


def test_pulls_and_pushes_of_mixed_sizes_round_trip() -> None:
    build(sanitizer=sanitizers.active())
    steps = 4
    with TfCluster(num_ps=1, num_workers=1) as cluster:
        result = cluster.run_chief(MIXED_BODY, timeout=240, args={"steps": steps})
        time.sleep(0.5)
        pulls = [c for c in cluster.counters("worker0") if c["role"] == "consumer"]
    assert result["totals"] == [float(steps * n) for n in result["sizes"]]
    assert result["lengths"] == [100001] * steps
    # Every pull went through the data plane: at least the float bytes of every step.
    assert sum(c["bytes_received"] for c in pulls) >= steps * 4 * sum(result["sizes"])


def _check(sanitizer: str, log_dir: Path) -> None:
    build(sanitizer=sanitizer)  # here, so the inner run's first test does not pay the build
    subset = chosen()
    status, out, seconds = sanitizers.run_pytest(sanitizer, log_dir, subset, timeout=1200)
    found = sanitizers.reports(log_dir)
    mine = sanitizers.ours(found)
    counts = f"{len(found)} reports, {len(mine)} in our code"
    print(f"{sanitizer}: {len(subset)} tests in {seconds:.0f} s (pytest exit {status}); {counts}")
    # A test that fails under the sanitizer is shown, not failed on: the instrumented library and the
    # preloaded runtime make everything several times slower, and the subset's timing assertions
    # (e.g. counters read 0.5 s after a step) are for the normal build. A crash in our code is a
    # report of ours (SEGV), which fails below.
    if status != 0:
        print(out)
    if mine:
        print(sanitizers.triage_table(mine))
    assert not mine, "\n\n".join(r.text[:6000] for r in mine)


def test_the_address_sanitizer_finds_nothing_in_the_extension(tmp_path: Path) -> None:
    _check("address", tmp_path)


@pytest.mark.xfail(
    strict=False,
    reason=(
        "timing-dependent reports (README, TSAN triage): the RecvOp-key group is handled (the key is "
        "copied); of 5 runs after it, 4 had none of ours and 1 had WriteFrom's sendmsg of a tensor TF "
        "allocated (tsl::port::AlignedMalloc) against a TF thread's write whose stack TSAN failed to "
        "restore: the suppressed TensorBuffer group, which its `race:` entry cannot match then (TSAN "
        "never matches a heap location's allocation stack): strict once that is handled"
    ),
)
def test_the_thread_sanitizer_finds_nothing_in_the_extension(tmp_path: Path) -> None:
    _check("thread", tmp_path)


# A library with a heap-use-after-free and a data race in a file under native/rendezvous/, built with
# the same flags: it shows that a report in our code is found and told from others.
_CANARY = """
#include <cstdlib>
#include <thread>
extern "C" int geryon_canary_use_after_free() {
  int* p = static_cast<int*>(std::malloc(sizeof(int) * 4));
  std::free(p);
  return p[1];
}
static int counter;
extern "C" int geryon_canary_race() {
  std::thread a([] { for (int i = 0; i < 1000; ++i) counter++; });
  std::thread b([] { for (int i = 0; i < 1000; ++i) counter++; });
  a.join();
  b.join();
  return counter;
}
"""


@pytest.mark.parametrize(
    ("sanitizer", "entry", "kind"),
    [
        ("address", "geryon_canary_use_after_free", "heap-use-after-free"),
        ("thread", "geryon_canary_race", "data race"),
    ],
)
def test_a_report_in_our_code_is_found_and_named(
    tmp_path: Path, sanitizer: str, entry: str, kind: str
) -> None:
    src = tmp_path / "native" / "rendezvous"
    src.mkdir(parents=True)
    (src / "canary.cc").write_text(_CANARY)
    lib = tmp_path / "libcanary.so"
    compiler = plan(sanitizer=sanitizer).compiler
    flags = ["-shared", "-fPIC", "-O1", "-g", f"-fsanitize={sanitizer}"]
    subprocess.run(
        [compiler, *flags, str(src / "canary.cc"), "-o", str(lib)],
        check=True,
        capture_output=True,
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    script = f"import ctypes; ctypes.CDLL({str(lib)!r}).{entry}(); print('survived')"
    env = {**os.environ, **sanitizers.environment(sanitizer, logs)}
    subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120, check=False)
    found = sanitizers.reports(logs)
    assert [r for r in found if kind in r.kind and r.ours], [r.kind for r in found]


# The handoff annotations (native/rendezvous/tsan.h) against a queue TSAN cannot see: a one-slot
# mailbox behind a spinlock in a library built WITHOUT -fsanitize, as TF's absl::Mutex is. Thread A
# builds a job and hands it to thread B through the mailbox; B runs it.
_MAILBOX = """
#include <atomic>
#include <string>
static std::atomic<int> lock_{0};
static void* slot_ = nullptr;
extern "C" void mailbox_put(void* p) {
  while (lock_.exchange(1, std::memory_order_acquire)) {}
  slot_ = p;
  lock_.store(0, std::memory_order_release);
}
extern "C" void* mailbox_take() {
  for (;;) {
    while (lock_.exchange(1, std::memory_order_acquire)) {}
    void* p = slot_;
    slot_ = nullptr;
    lock_.store(0, std::memory_order_release);
    if (p != nullptr) return p;
  }
}
// TF's kernel factory building a RecvOp and its rendezvous key (operator new, intercepted; the
// string's writes are not recorded, as in TF's own code).
extern "C" void* tf_new_key(const char* text) { return new std::string(text); }
"""


def _tsan_lib(tmp_path: Path, source: str) -> Path:
    """`source` built as a file of native/rendezvous/ (so its reports are ours) with -fsanitize=thread
    and GERYON_TSAN (tsan.h's annotations on), linked to the mailbox built WITHOUT -fsanitize."""
    compiler = plan(sanitizer="thread").compiler
    mailbox = tmp_path / "libmailbox.so"
    (tmp_path / "mailbox.cc").write_text(_MAILBOX)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", str(tmp_path / "mailbox.cc"), "-o", str(mailbox)],
        check=True,
        capture_output=True,
    )
    src = tmp_path / "native" / "rendezvous"
    src.mkdir(parents=True)
    (src / "under_test.cc").write_text(source)
    import tensorflow as tf  # the include path of thread_annotations.h, which tsan.h uses

    lib = tmp_path / "libunder_test.so"
    flags = ["-shared", "-fPIC", "-O1", "-g", "-std=c++17", "-fsanitize=thread", "-DGERYON_TSAN=1"]
    includes = [f"-I{REPO_ROOT / 'native' / 'rendezvous'}", f"-I{tf.sysconfig.get_include()}"]
    link = [f"-L{tmp_path}", "-lmailbox", f"-Wl,-rpath,{tmp_path}"]
    subprocess.run(
        [compiler, *flags, *includes, str(src / "under_test.cc"), "-o", str(lib), *link],
        check=True,
        capture_output=True,
    )
    return lib


_HANDOFF = """
#include <memory>
#include <thread>
#include "tsan.h"
extern "C" void mailbox_put(void*);
extern "C" void* mailbox_take();
struct Job { int value = 0; };
struct Bump {
  std::shared_ptr<Job> job;
  void operator()() { job->value += 1; }
};
static int unguarded;  // touched by both threads after the handoff: a real race
extern "C" int handoff(int annotate, int race_too) {
  std::thread b([annotate, race_too] {
    void* p = mailbox_take();
    if (annotate) {
      auto* task = static_cast<geryon::Announced<Bump>*>(p);
      (*task)();
      delete task;
    } else {
      auto* task = static_cast<Bump*>(p);
      (*task)();
      delete task;
    }
    if (race_too) unguarded += 1;
  });
  auto job = std::make_shared<Job>();
  job->value = 41;
  if (annotate) mailbox_put(new geryon::Announced<Bump>(Bump{job}));
  else mailbox_put(new Bump{job});
  if (race_too) unguarded += 1;
  b.join();
  return job->value;
}
"""


@pytest.mark.parametrize(
    ("annotate", "race_too", "expected"),
    [
        (0, 0, "the handoff"),  # TSAN cannot see the mailbox: the job looks raced
        (1, 0, "nothing"),  # announced and claimed: ordered
        (1, 1, "the unguarded counter only"),  # the annotation orders the job, not the rest
    ],
)
def test_an_annotated_handoff_is_ordered_and_hides_no_other_race(
    tmp_path: Path, annotate: int, race_too: int, expected: str
) -> None:
    lib = _tsan_lib(tmp_path, _HANDOFF)
    script = f"import ctypes; print(ctypes.CDLL({str(lib)!r}).handoff({annotate}, {race_too}))"

    def run(attempt: int) -> tuple[list[sanitizers.Report], list[sanitizers.Report]]:
        """One process: (its reports in our code, those of them on the counter)."""
        logs = tmp_path / f"logs{attempt}"
        logs.mkdir()
        env = {**os.environ, **sanitizers.environment("thread", logs)}
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.stdout.strip() == "42", proc.stderr[-3000:]
        mine = sanitizers.ours(sanitizers.reports(logs))
        # TSAN names a global it reports on ("Location is global 'unguarded' ..."): the job is on the heap.
        return mine, [r for r in mine if "'unguarded'" in r.text]

    mine, on_counter = run(0)
    if expected == "nothing":
        assert not mine, sanitizers.triage_table(mine)
    elif expected == "the handoff":
        assert mine and not on_counter, sanitizers.triage_table(mine)
    else:
        # The counter's race went unreported once in CI and once in a triage run under load (no report
        # at all, the job's neither); the cause is not established (TSAN drops, for one, a race whose
        # earlier access's stack it cannot restore). So up to 3 processes, each with nothing in our
        # code but the counter's race, and at least one that reports it.
        for attempt in range(1, 3):
            assert on_counter == mine, sanitizers.triage_table(mine)
            if on_counter:
                break
            mine, on_counter = run(attempt)
        assert on_counter and on_counter == mine, sanitizers.triage_table(mine)


# Tensor bytes reused through TF's allocator pool (tsan.h, ReleaseBytes/ClaimBytes), issue 16's chunk
# memcpy report: a writer thread reads a 256 KiB block (sendmsg of a tensor) and gives it back to a
# "pool" (the uninstrumented mailbox, as MklCPUAllocator's BFC keeps memory without free/malloc);
# the reader thread gets the memory back as a new buffer, at an offset BFC's splitting could give,
# and fills it (a chunk's memcpy).
_REUSE = """
#include <cstdlib>
#include <cstring>
#include <thread>
#include "tsan.h"
extern "C" void mailbox_put(void*);
extern "C" void* mailbox_take();
extern "C" char reuse_sink[4 << 10];  // exported: the copies into it cannot be optimized away
char reuse_sink[4 << 10];
static void Send(const char* p, size_t n) {
  for (size_t i = 0; i < n; i += sizeof(reuse_sink)) std::memcpy(reuse_sink, p + i, sizeof(reuse_sink));
}
extern "C" int reuse(int annotate, long offset, long size, int late_read) {
  // Four of tsan.h's 64 KiB grains, not a real chunk's 1 MiB: TSAN checks a reported race's every
  // 8-byte cell against the reports it has, so a 1 MiB raced fill took 15 s (1.4 s when not raced).
  constexpr size_t kOld = 256 << 10;
  char* block = static_cast<char*>(std::malloc(2 * kOld));
  std::memset(block, 7, 2 * kOld);
  std::thread writer([=] {
    Send(block, kOld);
    if (annotate) geryon::ReleaseBytes(block, kOld);
    mailbox_put(block);
    if (late_read) Send(block, kOld);  // a bug: reading what was given back
  });
  char* fresh = static_cast<char*>(mailbox_take()) + offset;
  if (annotate) geryon::ClaimBytes(fresh, size);
  std::memset(fresh, 1, size);
  writer.join();
  int first = fresh[0];
  std::free(block);
  return first;
}
"""


@pytest.mark.parametrize(
    ("annotate", "offset", "size", "late_read", "reported"),
    [
        (0, 0, 256 << 10, 0, True),  # TSAN cannot see the pool: the new buffer's fill looks raced
        (1, 0, 256 << 10, 0, False),  # same start: released and claimed there
        (1, (75 << 10) + 256, 128 << 10, 0, False),  # starts mid-block, off the grain: a shared grain
        (1, 0, 256 << 10, 1, True),  # a read after the release is still a race
    ],
)
def test_tensor_bytes_reused_through_an_uninstrumented_pool_are_ordered_by_their_release(
    tmp_path: Path, annotate: int, offset: int, size: int, late_read: int, reported: bool
) -> None:
    lib = _tsan_lib(tmp_path, _REUSE)
    logs = tmp_path / "logs"
    logs.mkdir()
    call = f"reuse({annotate}, {offset}, {size}, {late_read})"
    script = f"import ctypes; print(ctypes.CDLL({str(lib)!r}).{call})"
    env = {**os.environ, **sanitizers.environment("thread", logs)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.stdout.strip() == "1", proc.stderr[-3000:]
    mine = [r for r in sanitizers.ours(sanitizers.reports(logs)) if "data race" in r.kind]
    assert bool(mine) == reported, sanitizers.triage_table(mine) if mine else "no race reported"


# TF's rendezvous key read by our RecvFromRemoteAsync (server.cc): TF builds the RecvOp, with its
# ParsedKey, on one thread and its executor runs the kernel, which calls us, on another; one triage run
# reported our read of `parsed.FullKey()` against the kernel factory's operator new. The key is copied
# once with the reads unrecorded (tsan.h, GERYON_IGNORE_ACCESSES_*), and only the copy is used.
_KEY_COPY = """
#include <string>
#include <thread>
#include "tsan.h"
extern "C" void mailbox_put(void*);
extern "C" void* mailbox_take();
extern "C" void* tf_new_key(const char*);
extern "C" long key_copy(int annotate, int late_read) {
  long n = 0;
  std::thread ours([&n, annotate, late_read] {
    const std::string& tf_key = *static_cast<const std::string*>(mailbox_take());
    std::string key;
    if (annotate) {
      GERYON_IGNORE_ACCESSES_BEGIN();
      key = std::string(tf_key.data(), tf_key.size());
      GERYON_IGNORE_ACCESSES_END();
    } else {
      key = std::string(tf_key.data(), tf_key.size());
    }
    n = static_cast<long>(key.size());
    if (late_read) n += static_cast<long>(tf_key.size());  // a bug: TF's key read past the copy
  });
  // On this thread: the kernel factory's; then handed to ours through what TSAN cannot see.
  void* tf_key = tf_new_key("/job:ps/replica:0/task:0/device:CPU:0;1;"
                            "/job:worker/replica:0/task:0/device:CPU:0;v;0:0");
  mailbox_put(tf_key);
  ours.join();
  delete static_cast<std::string*>(tf_key);
  return n;
}
"""


@pytest.mark.parametrize(
    ("annotate", "late_read", "expected", "reported"),
    [
        (0, 0, 87, True),  # TSAN cannot see TF's hand-off: the read looks raced with the operator new
        (1, 0, 87, False),  # copied with the reads unrecorded: nothing
        (1, 1, 174, True),  # a read of TF's key after the copy is still reported
    ],
)
def test_tfs_key_copied_with_its_reads_unrecorded_is_no_race_and_a_later_read_is(
    tmp_path: Path, annotate: int, late_read: int, expected: int, reported: bool
) -> None:
    lib = _tsan_lib(tmp_path, _KEY_COPY)
    script = f"import ctypes; print(ctypes.CDLL({str(lib)!r}).key_copy({annotate}, {late_read}))"
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, **sanitizers.environment("thread", logs)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.stdout.strip() == str(expected), proc.stderr[-3000:]
    mine = [r for r in sanitizers.ours(sanitizers.reports(logs)) if "data race" in r.kind]
    assert bool(mine) == reported, sanitizers.triage_table(mine) if mine else "no race reported"


def test_a_sanitizer_that_is_not_one_is_refused_naming_the_choices() -> None:
    with pytest.raises(BuildError, match=r"sanitizer must be one of address, thread or none, got 'memory'"):
        plan(sanitizer="memory")


def test_the_variant_has_its_own_cache_entry_and_flags() -> None:
    plain, tsan = plan(), plan(sanitizer="thread")
    assert tsan.output.parent.name.endswith("-tsan") and tsan.digest != plain.digest
    assert "-fsanitize=thread" in tsan.compile_flags and "-fsanitize=thread" in tsan.link_flags
    assert "-fsanitize=thread" not in plain.compile_flags
    assert compiler_file("libtsan.so") == sanitizer_runtime("thread")


def test_a_compiler_without_the_runtime_is_a_clear_error(tmp_path: Path) -> None:
    # gcc and clang answer -print-file-name=X with the bare X when they have no such file (gcc's
    # `find_a_file` fallback; clang's Driver::GetFilePath): a compiler without libasan.so answers so.
    cxx = tmp_path / "c++"
    cxx.write_text(
        textwrap.dedent(
            """\
            #!/bin/sh
            case "$1" in -print-file-name=*) echo "${1#-print-file-name=}"; exit 0;; esac
            exec g++ "$@"
            """
        )
    )
    cxx.chmod(0o755)
    env = {**os.environ, "CXX": str(cxx)}
    proc = subprocess.run(
        [sys.executable, "-c", "from geryon.tf.build import sanitizer_runtime; sanitizer_runtime('address')"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{cxx} has no libasan.so" in proc.stderr and "apt-get install libasan8" in proc.stderr


def test_loading_an_instrumented_library_without_its_runtime_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import geryon.tf; geryon.tf.load()"],
        env={**os.environ, sanitizers.ENV: "thread", "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "GERYON_SANITIZER=thread: this process has no libtsan.so loaded" in proc.stderr
