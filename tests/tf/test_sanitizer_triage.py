"""Grouping sanitizer reports for triage (geryon.tf.sanitizers.groups / triage_table).

The reports under data/tsan/ are ThreadSanitizer output of `make sanitize` (the first triage run,
paths as it printed them), trimmed to the frames that matter; the thread-creation stack of the
first and the whole of `theirs.txt` are put together from lines of that run's other reports. So
the parser is checked against what the runtime writes, not against a format made up here. The
end-to-end check (a race in a library built from native/rendezvous/ is found and attributed) is in
test_sanitizers.py.
"""

from __future__ import annotations

from pathlib import Path

from geryon.tf import sanitizers

# Real reports, one per file (too wide for the source's line length).
DATA = Path(__file__).parent / "data" / "tsan"

# A read of our object's member on TF's thread (RecvFromRemoteAsync, called from TF's
# BaseRemoteRendezvous::RecvAsync) against its allocation in our Create on our reader's thread.
_OURS_BOTH_SIDES = (DATA / "ours_both_sides.txt").read_text()

# std::function's code inlined into our library reads a capture of our lambda (the first frame of
# our sources is three frames down); the other side is TF freeing a tensor buffer.
_INLINED_HEADER_FRAME = (DATA / "inlined_header_frame.txt").read_text()

# Two of TF's threads, ours only further down one stack: not attributed to us.
_THEIRS = (DATA / "theirs.txt").read_text()


def _write(tmp_path: Path, *texts: str) -> list[sanitizers.Report]:
    (tmp_path / f"{sanitizers.LOG_PREFIX}.2686").write_text("".join(texts))
    return sanitizers.reports(tmp_path)


def test_a_race_is_grouped_by_our_frame_its_kind_and_the_other_access(tmp_path: Path) -> None:
    found = _write(tmp_path, _OURS_BOTH_SIDES, _OURS_BOTH_SIDES)
    assert len(found) == 2 and all(r.ours for r in found)
    groups = sanitizers.groups(found)
    assert list(groups) == [
        sanitizers.Group("RecvFromRemoteAsync server.cc:212", "data race", "Create server.cc:229")
    ]
    assert len(groups[next(iter(groups))]) == 2


def test_our_frame_is_the_first_line_of_our_sources_under_inlined_library_code(tmp_path: Path) -> None:
    (report,) = _write(tmp_path, _INLINED_HEADER_FRAME)
    assert report.ours
    # Our access is the previous read: the group names it first, and TF's free as the other side,
    # its anonymous namespace and template arguments dropped.
    assert sanitizers.group_of(report) == sanitizers.Group(
        "operator() server.cc:246", "data race", "tensorflow::Buffer::~Buffer (libtensorflow_framework.so.2)"
    )


def test_the_table_counts_each_group_biggest_first(tmp_path: Path) -> None:
    found = _write(tmp_path, _INLINED_HEADER_FRAME, _OURS_BOTH_SIDES, _OURS_BOTH_SIDES, _THEIRS)
    assert not found[3].ours  # ours only far down a stack: not attributed to us
    lines = sanitizers.triage_table(sanitizers.ours(found)).splitlines()
    assert lines[0].split() == ["count", "kind", "our", "frame", "other", "frame"]
    assert lines[1].split()[:3] == ["2", "data", "race"] and "RecvFromRemoteAsync server.cc:212" in lines[1]
    assert lines[2].split()[0] == "1" and "operator() server.cc:246" in lines[2]
    assert len(lines) == 3


def test_a_race_in_tf_code_under_a_mutex_of_ours_is_not_ours(tmp_path: Path) -> None:
    # Two of TF's threads racing in TF's BFC allocator; one held a mutex of ours, whose "created at"
    # stack (our WriteAck) is printed with the report but is not where either access was.
    (report,) = _write(tmp_path, (DATA / "theirs_under_our_mutex.txt").read_text())
    assert not report.ours
