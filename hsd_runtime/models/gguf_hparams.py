"""The hyperparameters of a GGUF that llama.cpp asserts rather than checks.

llama.cpp reports most of what is wrong with a GGUF as an error its loader returns (a missing key,
a tensor of the wrong shape), which the engine turns into one line. A few things it asserts
(``GGML_ASSERT``), and an assertion aborts the whole process (signal 6), leaving a profile half
written: the block and expert counts and the RoPE scaling type when the model loads, and, when its
first context builds the graph, attention heads that share key/value heads evenly (a key/value head
count that does not divide the head count breaks the broadcast of every attention product) and the
head sizes some architectures' graphs take as equal. Those are checked here from the metadata,
before llama.cpp is handed the file (as of the llama.cpp that llama-cpp-python 0.3.36 builds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["hparams_refusal"]

_MAX_LAYERS, _MAX_EXPERTS = 512, 1024  # LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS
_ROPE_SCALING = ("none", "linear", "yarn", "longrope")
_SWA_LENGTHS = ("attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa")
_Scalar = Callable[..., "int | None"]  # an integer metadata value of the architecture by name (None: of another type)

# the architectures whose graph asserts a key head as long as a value head
_SAME_KV_LENGTH = frozenset(
    """afmoe apertus arcee arctic baichuan bailingmoe2 bert bitnet bloom chameleon chatglm codeshell cogvlm
    cohere2 cohere2moe command-r dbrx deci deepseek dots1 dream eagle3 ernie4_5 ernie4_5-moe eurobert
    exaone falcon glm4 glm4moe gpt2 gptneox granite granite_swa granitehybrid graniteswitch grok
    grovemoe hunyuan-moe hunyuan_vl hy_v3 internlm2 jais jais2 laguna llada llada-moe llama llama4
    maincoder mellum minimax-01 minimax-m2 minimax-m3 mistral3 modern-bert mpt muse-glimmer nanbeige
    nemotron nemotron_h nemotron_h_moe neo-bert olmo olmoe openelm orion paddleocr pangu-embedded phi2
    phi3 plamo pockettts qwen qwen2 qwen2moe qwen2vl qwen3 qwen35 qwen35moe qwen3moe qwen3next qwen3vl
    qwen3vlmoe qwen4exp refact rnd1 seed_oss smallthinker smollm3 spark2_5 stablelm starcoder starcoder2
    t5 xverse""".split()  # noqa: SIM905 - names as words: a table as llama.cpp's builders read
)
# the architectures whose graph asserts that RoPE turns a whole key head (rope.dimension_count)
_FULL_ROPE = frozenset(
    """apertus arcee arctic baichuan chameleon codeshell cogvlm cohere2moe dbrx deci deepseek dots1 dream
    ernie4_5 ernie4_5-moe exaone exaone-moe exaone4 falcon granite granite_swa graniteswitch grok
    grovemoe hunyuan-moe hunyuan_vl hy_v3 internlm2 jais2 llada llada-moe llama llama4 maincoder mellum
    minimax-01 minimax-m2 mistral3 nemotron olmo olmoe orion paddleocr pangu-embedded plamo pockettts
    qwen2 qwen2moe qwen2vl qwen3 qwen3moe qwen3vl qwen3vlmoe rnd1 seed_oss smallthinker smollm3
    starcoder2 talkie xverse""".split()  # noqa: SIM905 - names as words: a table as llama.cpp's builders read
)


def hparams_refusal(meta: Mapping[str, int | str], arrays: Mapping[str, tuple[int, ...]]) -> str | None:
    """Why llama.cpp would abort on a GGUF of scalar metadata ``meta`` and short integer arrays
    ``arrays`` (per-block values), in words (``"attention.head_count 4 over head_count_kv 3
    ..."``); None where nothing it asserts fails. A key that is missing or of another type is left
    to llama.cpp, which refuses it with an error rather than an abort."""
    arch = meta.get("general.architecture")

    def scalar(name: str, default: int = 0) -> int | None:
        value = meta.get(f"{arch}.{name}", default)
        return value if isinstance(value, int) else None

    def per_layer(name: str, n: int, default: list[int]) -> list[int]:
        """A value per block: an array of one, a scalar repeated, else ``default``."""
        key = f"{arch}.{name}"
        value = arrays.get(key, meta.get(key))
        if isinstance(value, int):
            return [value] * n
        return list(value) if isinstance(value, tuple) and len(value) == n else default

    layers = meta.get(f"{arch}.block_count")
    if not isinstance(layers, int):
        return None
    if not 1 <= layers <= _MAX_LAYERS:
        return f"{arch}.block_count {layers} (llama.cpp runs 1 to {_MAX_LAYERS} blocks)"
    nextn = scalar("nextn_predict_layers")
    if nextn is not None and nextn > layers:
        return f"{arch}.nextn_predict_layers {nextn} past its {layers} blocks"
    experts = _experts_refusal(arch, scalar, max(per_layer("expert_used_count", layers, [0])))
    if experts is not None:
        return experts
    scaling = meta.get(f"{arch}.rope.scaling.type", "linear")
    if isinstance(scaling, str) and scaling not in _ROPE_SCALING:
        return f"{arch}.rope.scaling.type {scaling!r} (llama.cpp knows {', '.join(_ROPE_SCALING)})"
    heads = per_layer("attention.head_count", layers, [0] * layers)
    kv_heads = per_layer("attention.head_count_kv", layers, heads)
    for block, (h, kv) in enumerate(zip(heads, kv_heads)):
        if h > 0 and (kv <= 0 or h % kv):
            return f"{arch}.attention.head_count {h} over head_count_kv {kv} in block {block} (heads share key/value heads evenly)"
    return _head_size_refusal(arch, scalar, heads[0])


def _experts_refusal(arch: object, scalar: _Scalar, used: int) -> str | None:
    """The expert counts llama.cpp asserts on as it loads (``used``: the most experts a block routes to)."""
    n, groups, group_used = scalar("expert_count"), scalar("expert_group_count"), scalar("expert_group_used_count")
    if n is None or groups is None or group_used is None:
        return None
    if arch in ("hunyuan_vl", "hunyuan-dense") and n <= 1:  # read as no experts
        n = used = 0
    what = f"{arch}.expert_count {n} with expert_used_count {used}, expert_group_count {groups}, expert_group_used_count {group_used}"
    if n > _MAX_EXPERTS or used > n:
        return f"{what} (at most {_MAX_EXPERTS} experts, of which at most all are used)"
    if n > 0 and (used == 0 or groups >= n or (groups > 1 and (n % groups or not 0 < group_used < groups))):
        return f"{what} (experts need some used, and groups that divide them, of which some but not all are used)"
    if n == 0 and (used or groups):
        return f"{what} (no experts, so none used and no groups)"
    return None


def _head_size_refusal(arch: object, scalar: _Scalar, heads: int) -> str | None:
    """The head sizes of block 0 (``heads`` heads) that the graph of ``arch`` asserts on."""
    width = scalar("embedding_length")
    if heads <= 0 or width is None:
        return None  # no attention in block 0 (a recurrent block): no head size is derived
    key, value, rope = scalar("attention.key_length", -1), scalar("attention.value_length", -1), scalar("rope.dimension_count", -1)
    if key == -1 and width % heads:
        return f"{arch}.embedding_length {width} over attention.head_count {heads} and no attention.key_length (heads of a whole size)"
    if key is None or value is None or rope is None or any(scalar(k, -1) != -1 for k in _SWA_LENGTHS):
        return None  # a key of another type is llama.cpp's to refuse; sliding-window blocks have sizes of their own
    key = width // heads if key == -1 else key
    value = width // heads if value == -1 else value
    rope = key if rope == -1 else rope
    if arch in _SAME_KV_LENGTH and key != value:
        return f"{arch}.attention.key_length {key} and value_length {value} ({arch} needs them equal)"
    if arch in _FULL_ROPE and rope != key:
        return f"{arch}.rope.dimension_count {rope} and attention.key_length {key} ({arch} needs them equal)"
    return None
