"""The model cache when it is shared or hostile, on tiny GGUFs written in-process (fast).

What someone else put in a shared cache is never followed or opened: a symbolic link or a FIFO
at a name a writer of an earlier version used for its temporary file is left as it is, and a
lock file that is a link or a FIFO is refused in one line. A refused command leaves the cache as
it found it, whatever made it refuse (a file llama.cpp cannot run, a spec past the file, a
prompt past the context, a tree llama.cpp cannot verify), and keeps what earlier runs made. A
cache that cannot be written into but holds every entry a run needs is only read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from hsd_runtime.models.packaged import pruned_path, quantized_path
from tests.gguf_tiny import CHAR_TOKENS, char_gguf, write_gguf
from tests.helpers import deadline, one_line_error, run
from tests.tiny import tiny_llama

pytestmark = pytest.mark.skipif(
    os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1", reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed"
)


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    """Tiny GGUFs of one vocabulary: a two-layer target, a one-layer drafter, and files llama.cpp
    refuses only when it loads them (their layout checks out)."""
    root = tmp_path_factory.mktemp("gguf")
    found = {
        "target": char_gguf(root / "target.gguf", seed=0, layers=2),
        "draft": char_gguf(root / "draft.gguf", seed=1),
        "headless": char_gguf(root / "headless.gguf", seed=3, head_count=False),
    }
    blocks = tiny_llama(4, layers=2, vocab=64)
    blocks.config.num_hidden_layers = 3  # the metadata claims a third block the tensors lack
    found["blocks"] = write_gguf(blocks, root / "blocks.gguf", tokens=CHAR_TOKENS)
    short = tiny_llama(5, layers=1, vocab=64)
    short.config.max_position_embeddings = 1  # a context of one cell
    found["one-cell"] = write_gguf(short, root / "one-cell.gguf", tokens=CHAR_TOKENS)
    data = found["target"].read_bytes()
    (root / "cut.gguf").write_bytes(data[:-64])  # the last tensor's data cut short
    found["cut"] = root / "cut.gguf"
    (root / "foreign.gguf").write_bytes(data.replace(b"llama", b"llamb"))  # an architecture llama.cpp does not know
    found["foreign"] = root / "foreign.gguf"
    return found


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty model cache of the test's own."""
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("HSD_PLAN_CACHE", str(folder))
    return folder


def _generate(chain: str, widths: str = "2") -> object:
    with deadline(120):
        return run("generate", "--engine", "llamacpp", "--chain", chain, "--widths", widths, "--prompt", "ab cd", "--max-new-tokens", "4")


def _tree(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every name under ``folder`` -> its mode, size and modification time (links not followed)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(folder))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _user_file(tmp_path: Path) -> Path:
    """A private file of the user's own, which nothing in the cache may write to."""
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes\n")
    mine.chmod(0o600)
    return mine


COPIES: dict[str, Callable[[Path], Path]] = {
    "quant=q8_0": lambda source: quantized_path(source, "q8_0"),
    "layers=1": lambda source: pruned_path(source, 1),
}


def _plant(path: Path, planted: str, target: Path) -> None:
    """Put at ``path`` what a teammate sharing the cache might: a symbolic link to ``target``, or a FIFO."""
    if planted == "link":
        path.symlink_to(target)
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("option", COPIES)
@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_what_is_planted_at_a_copys_old_temporary_name_is_left_alone(ggufs, cache, tmp_path, option, planted):
    """A link to the user's file, or a FIFO, at the fixed name the copy was once written to
    (``.NAME.tmp``): the copy is made at a name of its own, the file keeps its bytes and mode,
    and nothing hangs."""
    mine = _user_file(tmp_path)
    entry = COPIES[option](ggufs["target"])
    entry.parent.mkdir(parents=True)
    old_name = entry.parent / f".{entry.name}.tmp"
    _plant(old_name, planted, mine)
    ok = _generate(f"{ggufs['target']}:{option},{ggufs['target']}")
    assert ok.exit_code == 0, ok.output
    assert entry.is_file() and entry.stat().st_size > 1000
    assert mine.read_text() == "my notes\n" and stat.S_IMODE(mine.stat().st_mode) == 0o600
    assert old_name.is_symlink() if planted == "link" else stat.S_ISFIFO(old_name.lstat().st_mode)


@pytest.mark.parametrize("planted, what", [("link", "is a symbolic link"), ("fifo", "is a FIFO (named pipe)")])
def test_a_lock_file_that_is_a_link_or_a_fifo_is_refused(ggufs, cache, tmp_path, planted, what):
    mine = _user_file(tmp_path)
    entry = quantized_path(ggufs["target"], "q8_0")
    entry.parent.mkdir(parents=True)
    lock = entry.parent / f".{entry.name}.lock"
    _plant(lock, planted, mine)
    before = _tree(cache)
    one_line_error(_generate(f"{ggufs['target']}:quant=q8_0,{ggufs['target']}"), f"lock file {lock} {what}, not a regular file")
    assert _tree(cache) == before
    assert mine.read_text() == "my notes\n" and stat.S_IMODE(mine.stat().st_mode) == 0o600


# a late refusal -> (the chain, its widths, what the one line says); each level after a drafter
# that loads, so the refusal comes after that drafter's tokenizer entry is in the cache
LATE = {
    "layers past the file": ("{draft},{target}:layers=3", "2", "it has 2 decoder layers"),
    "a file llama.cpp cannot load": ("{draft},{headless}", "2", "headless.gguf"),
    "a copy llama.cpp cannot load": ("{draft},{headless}:quant=q4_0", "2", "headless.gguf quantized to q4_0"),
    "a file cut short": ("{draft},{cut}", "2", "cut.gguf"),
    "an unknown architecture": ("{draft},{foreign}", "2", "foreign.gguf"),
    "blocks the tensors lack": ("{draft},{blocks}", "2", "blocks.gguf"),
    "a context of one cell": ("{draft},{one-cell}", "2", "more than the models' context of 1"),
    "a tree of 64 nodes": ("{draft},{target}", "8x7", "at most 63 nodes"),
}


@pytest.mark.parametrize("case", LATE)
def test_a_late_refusal_leaves_an_empty_cache_empty(ggufs, cache, case):
    chain, widths, message = LATE[case]
    one_line_error(_generate(chain.format(**ggufs), widths), message)
    assert _tree(cache) == {}


def test_a_refusal_keeps_what_earlier_runs_cached(ggufs, cache):
    ok = _generate(f"{ggufs['target']}:quant=q8_0,{ggufs['target']}")
    assert ok.exit_code == 0, ok.output
    before = _tree(cache)
    one_line_error(_generate(f"{ggufs['target']}:quant=q8_0,{ggufs['target']}", "8x7"), "at most 63 nodes")
    assert _tree(cache) == before


def test_a_read_only_cache_that_holds_the_copies_is_only_read(ggufs, cache, monkeypatch):
    """A team's cache, read-only to this user, holding the pruned and quantized copies and the
    tokenizer a chain needs: the chain runs on them, and nothing there is made or changed."""
    chain = f"{ggufs['target']}:layers=1:quant=q8_0,{ggufs['target']}"
    ok = _generate(chain)
    assert ok.exit_code == 0, ok.output
    for path in [*cache.rglob("*"), cache]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    real = os.access
    # what os.access answers for a user other than the folders' owner; root's own answer ignores modes
    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: False if mode & os.W_OK and Path(path).is_relative_to(cache) else real(path, mode, **kw)
    )
    before = _tree(cache)
    try:
        ok = _generate(chain)
        assert ok.exit_code == 0, ok.output
        assert _tree(cache) == before
    finally:
        for path in [cache, *cache.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
