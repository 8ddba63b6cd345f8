"""Regression tests for defects found by the hostile round of issue 31 (each fails before its
fix). Defect 5, the fork's model record, is tested in test_undo_fork.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .tiny_model import NO_SYSTEM_TEMPLATE, write_tiny_gguf_with_template

REPO = Path(__file__).resolve().parent.parent


def test_defect10_an_empty_model_file_is_named_in_its_error(tmp_path) -> None:
    """The engine's `auto` backend choice fingerprints the file first; an empty one made mmap
    fail with "cannot mmap an empty file" and no path."""
    empty = tmp_path / "empty.gguf"
    empty.touch()
    done = subprocess.run(
        [sys.executable, "-m", "engine", "--model", str(empty), "--data-dir",
         str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache")],
        input='{"type": "shutdown"}\n', capture_output=True, text=True, cwd=REPO, timeout=120)
    # Where ggml is not built, a note that numpy stands in for it may come first.
    events = [json.loads(line) for line in done.stdout.splitlines()]
    event = next(e for e in events if e["type"] == "error")
    assert event["fatal"] is True
    assert event["message"].startswith("not a GGUF file") and str(empty) in event["message"]


@pytest.mark.parametrize("command", ["chat", "send", "fork"])
def test_defect8_chat_send_and_fork_make_the_data_directory_private(tmp_path, tiny_gguf,
                                                                     command) -> None:
    """docs/security.md: an existing data directory others may read is made private (0700)
    by every command that writes sessions, not only by the engine process."""
    data = tmp_path / "data"

    def channel(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "channel_cli.cli", *argv, "--data-dir",
                               str(data), "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    if command == "fork":
        channel("send", "--session", "src", "--no-wait", "a session to fork")
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o755)
    done = channel(*{"chat": ["chat", "--model", str(tiny_gguf), "--max-tokens", "2", "hi"],
                     "send": ["send", "--no-wait", "hello"],
                     "fork": ["fork", "src", "copy"]}[command])
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert "made private (0700)" in done.stderr


# A child that appends one event under a file size limit just above the stream's size: the
# kernel writes what fits and refuses the rest (EFBIG), as a full disk does (ENOSPC).
APPEND_UNDER_A_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from engine.errors import StreamError
from engine.session.stream import StreamLog
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death at the limit
path = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 100, resource.RLIM_INFINITY))
try:
    StreamLog(path).append("user", "x" * 2000)
except StreamError as exc:
    print(exc)
"""


def test_defect7_a_failed_append_leaves_no_torn_fragment(tmp_path) -> None:
    """A write cut short by a full disk left a fragment (1033 bytes) that every later read
    warned about; the append now truncates the stream back to its size before the write."""
    from engine.session.stream import StreamLog

    log = StreamLog(tmp_path / "s.stream.jsonl")
    log.append("user", "kept")
    before = log.path.read_bytes()
    done = subprocess.run([sys.executable, "-c", APPEND_UNDER_A_SIZE_LIMIT, str(log.path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    [message] = done.stdout.splitlines()
    assert message.startswith(f"cannot append to {log.path}: File too large")
    assert log.path.read_bytes() == before
    read = StreamLog(log.path).read()
    assert [e.content for e in read.events] == ["kept"] and read.warnings == []


def _engine(tmp_path: Path, gguf: Path, backend: str):
    from engine.process.client import spawn

    engine = spawn(tmp_path / "data", tmp_path / "cache", gguf,
                   ["--backend", backend, "--debounce-s", "600"])
    engine.wait_for("ready", timeout=120)
    return engine


def _backends() -> list:
    from engine.backends.ggml.lib import available

    problem = available()
    return [pytest.param("ggml", marks=pytest.mark.skipif(
        problem is not None, reason=f"ggml is not built here: {problem}")), "numpy"]


@pytest.mark.parametrize("backend", _backends())
def test_defect6_a_model_file_truncated_in_place_ends_the_turn_not_the_engine(
        tmp_path, tiny_gguf, backend) -> None:
    """A re-download into the model file truncates it in place; reading the mapping past its
    new end raised SIGBUS and the engine died without a word. ggml maps the GGUF, numpy the
    weight image in the cache: whichever is mapped is the file that must not kill it."""
    import shutil

    gguf = Path(shutil.copy(tiny_gguf, tmp_path / "model.gguf"))
    engine = _engine(tmp_path, gguf, backend)
    stream = tmp_path / "data" / "s.stream.jsonl"
    snapshot = tmp_path / "data" / "s.snapshot.bin"
    try:
        engine.request({"type": "open", "session": "s"}, "booted")
        assert engine.request({"type": "turn", "session": "s", "text": "hello",
                               "max_tokens": 3}, "end_of_turn")["type"] == "end_of_turn"
        assert engine.request({"type": "save", "session": "s"},
                              "snapshot")["status"] == "saved"
        kept = {path: path.read_bytes() for path in (stream, snapshot)}
        mapped = gguf if backend == "ggml" else next((tmp_path / "cache").rglob("*.chwi"))
        whole = mapped.read_bytes()
        os.truncate(mapped, len(whole) // 2)  # in place: the same inode, shorter

        error = engine.request({"type": "turn", "session": "s", "text": "and now?",
                                "max_tokens": 3}, "end_of_turn")
        assert error["type"] == "error" and error["code"] == "ModelFileChangedError"
        assert "truncated while in use" in error["message"]
        assert error["message"].endswith(str(mapped))
        assert engine.request({"type": "stats"}, "stats")["sessions"]["s"]
        assert engine.proc.poll() is None
        assert {path: path.read_bytes() for path in kept} == kept  # nothing logged or saved
        engine.send({"type": "shutdown"})
        assert engine.close() == 0
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()
    mapped.write_bytes(whole)  # the download finished: the next engine runs on it
    engine = _engine(tmp_path, gguf, backend)
    try:
        booted = engine.request({"type": "open", "session": "s"}, "booted")
        assert [m["role"] for m in booted["transcript"]][-2:] == ["user", "assistant"]
        assert engine.request({"type": "turn", "session": "s", "text": "and now?",
                               "max_tokens": 3}, "end_of_turn")["type"] == "end_of_turn"
    finally:
        engine.send({"type": "shutdown"})
        engine.close()


def test_defect6_a_model_file_replaced_by_rename_runs_on_with_a_warning(tmp_path,
                                                                        tiny_gguf) -> None:
    """A file replaced by a rename leaves the old inode, and so the mapping, whole: the turn
    runs on the model loaded, and the engine says once that the file changed on disk. A file
    only touched (a new mtime, the same bytes) is neither an error nor a warning."""
    import shutil

    gguf = Path(shutil.copy(tiny_gguf, tmp_path / "model.gguf"))
    engine = _engine(tmp_path, gguf, "auto")
    try:
        engine.request({"type": "open", "session": "s"}, "booted")
        mtime = gguf.stat().st_mtime_ns + 10**9
        os.utime(gguf, ns=(mtime, mtime))
        assert engine.request({"type": "turn", "session": "s", "text": "touched",
                               "max_tokens": 3}, "end_of_turn")["type"] == "end_of_turn"
        # (Where ggml is not built, a warning that numpy stands in for it comes at start.)
        assert not [e for e in engine.log if e["type"] == "warning" and
                    "model file" in e["message"]]
        os.replace(shutil.copy(tiny_gguf, tmp_path / "download.part"), gguf)
        for text in ("first", "second"):
            end = engine.request({"type": "turn", "session": "s", "text": text,
                                  "max_tokens": 3}, "end_of_turn")
            assert end["type"] == "end_of_turn"
        warnings = [e["message"] for e in engine.log
                    if e["type"] == "warning" and "model file" in e["message"]]
        assert warnings == [f"model file changed on disk; this engine keeps running on the "
                            f"model it loaded (restart Channel to load the file anew): {gguf}"]
    finally:
        engine.send({"type": "shutdown"})
        engine.close()




def test_defect9_channel_models_lists_truncated_files_and_broken_templates_as_unusable(
        tmp_path, tiny_gguf) -> None:
    """A GGUF cut off mid-download (3 MB of 98) and a template that fails on every render
    were listed as supported; each now says why it cannot run, in one line."""
    import shutil

    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    whole = Path(shutil.copy(tiny_gguf, models / "whole.gguf"))
    cut = Path(shutil.copy(tiny_gguf, models / "cut.gguf"))
    os.truncate(cut, cut.stat().st_size // 3)
    write_tiny_gguf_with_template(models / "broken-template.gguf",
                                  "{{ messages[0]['content'].no() }}")
    write_tiny_gguf_with_template(models / "no-system.gguf", NO_SYSTEM_TEMPLATE)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_", "CHANNEL_"))}
    done = subprocess.run([sys.executable, "-m", "channel_cli.cli", "models", "--json"],
                          env={**env, "HOME": str(tmp_path / "home")}, capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {Path(row["path"]).name: row for row in map(json.loads, done.stdout.splitlines())}
    assert rows["whole.gguf"]["supported"] and rows["no-system.gguf"]["supported"]
    assert not rows["cut.gguf"]["supported"]
    assert rows["cut.gguf"]["status"] == (
        f"file truncated: its tensor data ends at byte {whole.stat().st_size:,}, the file "
        f"has {cut.stat().st_size:,} (an interrupted download?)")
    assert not rows["broken-template.gguf"]["supported"]
    assert rows["broken-template.gguf"]["status"] == (
        "chat template failed: 'str object' has no attribute 'no' (on every sample "
        "conversation)")


def test_defect9_loading_a_truncated_gguf_is_refused_naming_the_file(tmp_path,
                                                                      tiny_gguf) -> None:
    """gguf-py's own error was "corrupt GGUF file (cannot reshape array of size ...)"."""
    import shutil

    from engine.errors import TruncatedModelError
    from engine.model.model import load_model

    cut = Path(shutil.copy(tiny_gguf, tmp_path / "cut.gguf"))
    os.truncate(cut, cut.stat().st_size // 3)
    with pytest.raises(TruncatedModelError) as refused:
        load_model(cut, tmp_path / "cache", f32_weights=False)
    assert str(refused.value).startswith("model file truncated: its tensor data ends at byte")
    assert str(refused.value).endswith(f"(an interrupted download?): {cut}")


# Renders a user's message, then fails on the reply: the turn fails after its message is logged.
NO_REPLY_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{{ raise_exception('no replies') }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_minor_channel_chat_says_a_turn_failed_after_logging_in_one_line(tmp_path) -> None:
    """The session logs the failure with its traceback; with no log handler in `channel chat`,
    logging's last resort printed that traceback above the one-line error."""
    gguf = write_tiny_gguf_with_template(tmp_path / "no-reply.gguf", NO_REPLY_TEMPLATE)
    done = subprocess.run(
        [sys.executable, "-m", "channel_cli.cli", "chat", "--model", str(gguf), "--max-tokens",
         "2", "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache"),
         "hello"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == ["channel: error: chat template failed: no replies"]
    # The message stays in the stream, withdrawn: the next boot does not answer it.
    records = [json.loads(line) for line in
               (tmp_path / "data" / "default.stream.jsonl").read_text().splitlines()]
    assert [r["role"] for r in records] == ["user", "assistant"]
    assert records[1]["stop"] == "error"


def _permissions_apply() -> bool:
    """Whether this process is refused a file in a directory it may not write (root, with
    its usual capabilities, is not)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o500)
        try:
            Path(scratch, "probe").touch()
        except PermissionError:
            return True
        finally:
            os.chmod(scratch, 0o700)
    return False


@pytest.mark.skipif(not _permissions_apply(),
                    reason="this user (root) writes to a read-only directory anyway")
def test_minor_a_fork_in_a_read_only_directory_is_a_named_one_line_error(engine,
                                                                         tmp_path) -> None:
    """The engine's fork error was the raw "[Errno 30] Read-only file system: ..." with the
    code OSError."""
    data = tmp_path / "data"
    e = engine(data_dir=data)
    e.request({"type": "open", "session": "a"}, "booted")
    e.request({"type": "turn", "session": "a", "text": "hi", "max_tokens": 2}, "end_of_turn")
    e.request({"type": "save", "session": "a"}, "snapshot")
    before = sorted(p.name for p in data.iterdir())
    os.chmod(data, 0o500)
    try:
        error = e.request({"type": "fork", "session": "a", "new": "b"}, "forked")
    finally:
        os.chmod(data, 0o700)
    assert error["type"] == "error" and error["code"] == "ForkError"
    assert error["message"] == f"cannot fork 'a' as 'b': {data} is read-only (permission denied)"
    assert sorted(p.name for p in data.iterdir()) == before
    assert e.request({"type": "fork", "session": "a", "new": "b"}, "forked")["events"] >= 2
