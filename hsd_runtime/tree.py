@dataclass
class DraftTree:
    """A drafted tree in breadth-first order.

    ``tokens[i]`` is node i's token, ``parents[i]`` its parent's index (-1: a child of the root),
    ``depths[i]`` its depth (1 for the root's children). ``probs``, when sampling, is
    ``[1 + N, V]``: the drafter's distribution at the root (row 0) and after every node (row
    1 + i), the distributions the children were drawn from.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    probs: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int) -> int:
        """Append a child of ``parent`` (-1: the root); return its index."""
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        """Indices of ``node``'s children (-1: the root's), in the order they were drawn."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def path(self, node: int) -> list[int]:
        """Indices from the root's child down to ``node`` (empty for the root, -1)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)


def tree_mask(tree: DraftTree, past: int, tail: int, first: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive 4-D attention mask ``[1, 1, tail + M, past + tail + M]`` of one pass.

    The pass feeds ``tail`` linear tokens (causal, after ``past`` cached positions) and then the
    tree nodes ``first..N-1`` (M of them); nodes ``0..first-1`` sit in the cache right after the
    tail's place, in order. Each node sees every linear position and its own ancestors and itself.
    """
    n = len(tree)
    m = n - first
    q, kv = tail + m, past + tail + m
    allowed = torch.zeros(q, kv, dtype=torch.bool)
    base = past + tail  # key position of tree node 0 ... wait: nodes 0..first-1 precede the tail?
    raise NotImplementedError(base, allowed, dtype, device, math)
