"""What a user types at the edges of the trainers and of the folders they make.

``distill``, ``heads train`` and ``steer train`` write a folder (``--out``) and a corpus cache
(``--cache``); ``generate`` reads heads (``bpd:DIR``) and steering (``MODEL:steer=DIR``) folders.
The contract: bad input is one line ``Error: ...`` with a non-zero exit, never a traceback and
never a hang (a FIFO in a file's place would block a read forever: every command runs under a
deadline), with every file of the folder as it was. Folders that cannot be written are refused
before any model is loaded, and every file of a trained folder is written with one mode, so a
teammate can load a shared one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hsd_planner.training import corpus as corpus_module
from hsd_runtime import ModelLoader
from hsd_runtime.learned.heads import HEADS_CARD, HEADS_FILE, BlockHeads, HeadsCard, save_heads
from hsd_runtime.learned.steering import STEER_CARD, STEER_FILE, SteeringCard, SteeringProjection, default_taps, save_steering
from hsd_runtime.learned.trained import write_files
from hsd_runtime.terms.errors import PathError
from tests.helpers import one_line_error
from tests.helpers import run as run_cli
from tests.test_edges import deadline, refused, snapshot

ROOT = os.geteuid() == 0
# the cheapest run of each trainer on the tiny models: one step over four prompts, one sample each
FAST = ["--max-new-tokens", 4, "--train-batch", 2, "--steps", 1, "--samples-per-prompt", 1, "--max-prompts", 4, "--reserve", 0]
FAST += ["--device", "cpu", "--dtype", "fp32"]


def run(*args: object):
    """The command in-process, failing (not hanging) when it blocks."""
    with deadline(60):
        return run_cli(*args)


def trainer(command: str, tiny_dirs: dict[str, Path], out: object, *extra: object) -> list[object]:
    """The arguments of one fast run of ``command`` (``distill``, ``heads``, ``steer``) into ``out``.

    All three train on the tiny target's corpus of the same prompts and settings: one cache entry
    serves them all."""
    target, draft = tiny_dirs["target"], tiny_dirs["draft"]
    head = {
        "distill": ["distill", "--target", target, "--init", "layers=1"],
        "heads": ["heads", "train", "--model", target, "--heads", 3],
        "steer": ["steer", "train", "--drafter", draft, "--verifier", target],
    }[command]
    return [*head, "--out", out, "--prompts", "p.txt", *FAST, *extra]


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """The working directory of a test, with the prompts ``p.txt``."""
    (tmp_path / "p.txt").write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(40)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def trained(tiny_dirs, tmp_path_factory) -> Path:
    """A folder with ``p.txt``, a student trained by ``distill`` (``student/``) and the corpus
    cache it filled (``cache/``, one entry), made once."""
    root = tmp_path_factory.mktemp("trained")
    (root / "p.txt").write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(40)))
    with contextlib.chdir(root):
        result = run(*trainer("distill", tiny_dirs, "student", "--cache", "cache"))
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def copy_of_trained(trained, tmp_path, monkeypatch) -> Path:
    """A private copy of :func:`trained`, the working directory of the test."""
    folder = tmp_path / "copy"
    shutil.copytree(trained, folder)
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def no_model_loads(monkeypatch) -> None:
    """Any model load fails the test: a refusal must come before the first one."""

    def load(self, spec):
        raise AssertionError(f"a model was loaded ({spec}) before the refusal")

    monkeypatch.setattr(ModelLoader, "load", load)


def heads_folder(tiny_dirs: dict[str, Path], folder: Path) -> tuple[Path, str]:
    """A heads directory for the tiny target, and the chain that drafts with it."""
    card = HeadsCard(host=str(tiny_dirs["target"]), hidden_size=32, heads=3, inner=32, logits_width=64)
    save_heads(folder / "heads", BlockHeads(32, 3), card)
    return folder / "heads", f"bpd:{folder / 'heads'},{tiny_dirs['target']}"


def steering_folder(tiny_dirs: dict[str, Path], folder: Path) -> tuple[Path, str]:
    """A steering directory for the tiny draft under the tiny target, and the chain that runs it."""
    card = SteeringCard(
        drafter=str(tiny_dirs["draft"]),
        verifier=str(tiny_dirs["target"]),
        taps=default_taps(4),
        verifier_hidden=32,
        drafter_layers=2,
        width=64,
        form="lowrank",
        rank=4,
    )
    save_steering(folder / "steer", SteeringProjection(card), card)
    return folder / "steer", f"{tiny_dirs['draft']}:steer={folder / 'steer'},{tiny_dirs['target']}"


TRAINED = {"bpd": (heads_folder, HEADS_FILE, HEADS_CARD), "steer": (steering_folder, STEER_FILE, STEER_CARD)}


def generate(chain: str) -> list[object]:
    return ["generate", "--chain", chain, "--widths", 2, "--prompt", "w1", "--max-new-tokens", 2, "--dtype", "fp32", "--device", "cpu"]


# --- hangs: a FIFO in a file's place ------------------------------------------------------------


# lets go every reader blocked on the FIFO argv[1] after argv[2] seconds, saying so on stdout
RELEASE = """
import os, sys, time
time.sleep(float(sys.argv[2]))
while True:
    try:
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no one reads
    except OSError:
        time.sleep(0.05)
        continue
    os.close(fd)
    print("released", flush=True)
"""


@contextlib.contextmanager
def fifo_at(path: Path, seconds: float = 15) -> Iterator[None]:
    """A FIFO at ``path`` (whatever was there removed), and a watch that fails the test when
    anything blocks reading it: after ``seconds`` a blocked reader is let go (the write end is
    opened and closed, so its read ends) rather than left to hang the test run. The watch is
    another process: a read blocked in a library's native code may hold the interpreter's lock,
    so neither a thread nor the deadline's signal handler would run."""
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    os.mkfifo(path)
    watch = subprocess.Popen([sys.executable, "-c", RELEASE, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    try:
        yield
    finally:
        watch.kill()
        released = watch.communicate()[0]
    assert not released, f"a read of the FIFO {path} blocked"


@pytest.mark.parametrize("kind", list(TRAINED))
def test_a_fifo_in_place_of_trained_weights_is_refused_without_blocking(tiny_dirs, folder, kind):
    make, weights, _ = TRAINED[kind]
    directory, chain = make(tiny_dirs, folder)
    with fifo_at(directory / weights):
        refused(folder, generate(chain), f"{directory / weights} is a FIFO")


@pytest.mark.parametrize("entry", ["key.json", "corpus.pt", "itself"])
@pytest.mark.parametrize("command", ["distill", "heads", "steer"])
def test_a_fifo_in_a_corpus_cache_entry_is_refused_before_any_model_loads(tiny_dirs, copy_of_trained, no_model_loads, command, entry):
    (cached,) = (copy_of_trained / "cache").iterdir()
    with fifo_at(cached if entry == "itself" else cached / entry):
        refused(copy_of_trained, trainer(command, tiny_dirs, "new", "--cache", "cache"), "is a FIFO (named pipe)")


def test_a_fifo_in_place_of_a_students_checkpoint_is_refused(tiny_dirs, copy_of_trained, no_model_loads):
    with fifo_at(copy_of_trained / "student" / "checkpoint" / "state.pt"):
        refused(
            copy_of_trained, trainer("distill", tiny_dirs, "student", "--resume"), "the checkpoint student/checkpoint/state.pt is a FIFO"
        )


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_a_fifo_in_a_model_directory_is_refused_without_blocking(tiny_dirs, folder, name):
    """A student (or any model directory) is read by transformers file by file: each entry is
    checked before it is opened."""
    model = folder / "model"
    shutil.copytree(tiny_dirs["draft"], model)
    with fifo_at(model / name):
        refused(folder, generate(f"{model},{tiny_dirs['target']}"), f"{name} is a FIFO (named pipe), not a file of a model directory")


# --- tracebacks: cards nested past the parser, links that lead nowhere ------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [("[" * 100_000, "is nested too deeply"), ('{"format": ' + "9" * 5000 + "}", "holds a number written with 5,000 characters")],
    ids=["deep", "long number"],
)
@pytest.mark.parametrize("kind", list(TRAINED))
def test_a_card_the_json_reader_refuses_is_one_line(tiny_dirs, folder, kind, text, fragment):
    make, _, card = TRAINED[kind]
    directory, chain = make(tiny_dirs, folder)
    (directory / card).write_text(text)
    refused(folder, generate(chain), f"is not a valid card: it {fragment}")


@pytest.mark.parametrize("option", ["--cache", "--out"])
@pytest.mark.parametrize("command", ["distill", "heads", "steer"])
def test_a_dangling_symbolic_link_is_refused_before_any_model_loads(tiny_dirs, folder, no_model_loads, command, option):
    (folder / "link").symlink_to("nowhere")
    args = trainer(command, tiny_dirs, "link" if option == "--out" else "out", *(["--cache", "link"] if option == "--cache" else []))
    refused(folder, args, f"{option} link is a symbolic link to nowhere, which does not exist")


@pytest.mark.parametrize(
    "command, option, field",
    [("distill", "--target", "target"), ("distill", "--init", "init_model"), ("heads", "--model", "model"),
     ("steer", "--drafter", "drafter"), ("steer", "--verifier", "verifier")],
)  # fmt: skip
def test_a_model_on_the_llama_cpp_engine_is_refused_before_any_model_loads(tiny_dirs, folder, no_model_loads, command, option, field):
    """A trainer reads hidden states and trains weights, which llama.cpp does not expose: decided
    with the options, before a model, a cache entry or --out is made."""
    args = trainer(command, tiny_dirs, "out", "--cache", "cache")
    args[args.index(option) + 1] = "m.gguf:engine=llamacpp"
    refused(folder, args, f"{field}: 'm.gguf:engine=llamacpp' runs on the llama.cpp engine", env={"HSD_PLAN_CACHE": str(folder / "models")})


# --- checks that came after minutes of work ----------------------------------------------------------


def _unusable(folder: Path, kind: str) -> str:
    """Make in ``folder`` a path of ``kind`` that no trainer can write a folder at; return its name."""
    if kind == "regular file":
        (folder / "x").write_text("mine")
    elif kind == "FIFO":
        os.mkfifo(folder / "x")
    elif kind == "symbolic link loop":
        (folder / "x").symlink_to("x")
    else:  # under a regular file
        (folder / "f").write_text("mine")
        return "f/x"
    return "x"


FRAGMENTS = {
    "regular file": "is a file",  # click's own check of a folder option, or ours: one line either way
    "FIFO": "is a FIFO (named pipe), not a folder",
    "symbolic link loop": "is a symbolic link loop",
    "under a regular file": "is a regular file, not a folder",
}


@pytest.mark.parametrize("kind", list(FRAGMENTS))
@pytest.mark.parametrize("option", ["--out", "--cache"])
@pytest.mark.parametrize("command", ["distill", "heads", "steer"])
def test_an_unusable_folder_is_refused_before_any_model_loads(tiny_dirs, folder, no_model_loads, command, option, kind):
    name = _unusable(folder, kind)
    args = trainer(command, tiny_dirs, name if option == "--out" else "out", *(["--cache", name] if option == "--cache" else []))
    t0 = time.perf_counter()
    refused(folder, args, FRAGMENTS[kind])
    print(f"{command} {option} {kind}: refused in {time.perf_counter() - t0:.2f} s")


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` with the immutable flag set (root, on a file system that has it), cleared after."""
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True) if shutil.which("chattr") else None
    if made is None or made.returncode:
        pytest.skip("setting the immutable flag needs root and chattr on a file system that has it")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("option", ["--out", "--cache"])
def test_an_immutable_folder_is_refused_before_any_model_loads(tiny_dirs, folder, no_model_loads, option):
    (folder / "ro").mkdir()
    for name in ("ro", "ro/new"):
        args = trainer("heads", tiny_dirs, name if option == "--out" else "out", *(["--cache", name] if option == "--cache" else []))
        with immutable(folder / "ro"):
            refused(folder, args, "cannot be written into")


@pytest.mark.skipif(ROOT, reason="root writes through a folder's mode bits (the immutable flag is tested instead)")
def test_a_read_only_folder_is_refused_before_any_model_loads(tiny_dirs, folder, no_model_loads):
    (folder / "ro").mkdir(mode=0o555)
    try:
        refused(folder, trainer("distill", tiny_dirs, "ro/new"), "cannot be written into")
        refused(folder, trainer("distill", tiny_dirs, "out", "--cache", "ro"), "cannot be written into")
    finally:
        (folder / "ro").chmod(0o755)


def test_a_cache_that_fails_at_write_time_is_one_line_and_keeps_no_entry(tiny_dirs, folder, monkeypatch):
    def full(_obj, _path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus_module.torch, "save", full)
    one_line_error(
        run(*trainer("heads", tiny_dirs, "out", "--cache", "cache")), "cannot cache the corpus in cache: No space left on device"
    )
    assert list((folder / "cache").iterdir()) == []  # no entry, no temporary folder


def test_a_trained_folder_that_fails_at_write_time_keeps_its_old_files(tmp_path):
    (tmp_path / "card.json").write_text("old")

    def half(stage: Path) -> None:
        (stage / "card.json").write_text("new")
        raise OSError(errno.ENOSPC, "No space left on device")

    before = snapshot(tmp_path)
    with pytest.raises(PathError, match=r"cannot write the card into .*: No space left on device"):
        write_files(tmp_path, "the card", half)
    assert snapshot(tmp_path) == before  # the old card, and no temporary folder


# --- modes --------------------------------------------------------------------------------------------


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


def test_every_file_of_a_trained_folder_has_the_mode_of_its_card(tiny_dirs, trained, folder):
    student = _modes(trained / "student")
    assert student["model.safetensors"] == student["distill.json"] and set(student.values()) == {student["distill.json"]}, student
    cache = _modes(trained / "cache")
    assert set(cache.values()) == {student["distill.json"]}, cache
    result = run(*trainer("heads", tiny_dirs, "heads", "--cache", trained / "cache"))
    assert result.exit_code == 0, result.output
    heads = _modes(folder / "heads")
    assert heads[HEADS_FILE] == heads[HEADS_CARD] and set(heads.values()) == {heads[HEADS_CARD]}, heads
    directory, _ = steering_folder(tiny_dirs, folder)
    steering = _modes(directory)
    assert steering[STEER_FILE] == steering[STEER_CARD], steering
    assert torch.load(folder / "heads" / "checkpoint" / "state.pt", weights_only=True)["step"] == 1
