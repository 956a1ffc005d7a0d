"""Mixture-of-experts feed-forward (Shazeer et al. 2017; Switch/GShard routing as Mixtral,
Qwen2-MoE and OLMoE use it): a router scores every expert for each position, the top_k
experts run on it, and their outputs are summed weighted by the router's probabilities.

Each expert is a feed-forward network of the spec's shape (``FeedForward``), so a model with
E experts holds E times the feed-forward parameters while each token pays for top_k of them:
parameter reports count all experts, FLOP reports count the work a token does (router,
top_k experts, shared experts), which is what makes these models cheap per token.

Routing, as published models compute it (transformers' MixtralSparseMoeBlock and
DeepseekV3TopkRouter), in float32: scores p = softmax(x W_router) over all E experts
(``scoring: softmax``: Mixtral, Qwen2-MoE, OLMoE, DeepSeek-V2) or sigmoid(x W_router) each
(``scoring: sigmoid``: DeepSeek-V3). The experts are chosen by p + b, b a learned bias per
expert (``score_bias``: DeepSeek-V3's e_score_correction_bias, which moves choices only, never
weights), among the ``top_groups`` best of ``groups`` equal groups of experts (a group's score
the sum of its two best; DeepSeek-V3's n_group, topk_group); the top_k chosen keep their
scores p, divided by their sum with ``normalize`` (Mixtral; Qwen2-MoE, OLMoE and DeepSeek-V3's
``norm_topk_prob``), then multiplied by ``routed_scale`` (DeepSeek-V3's routed_scaling_factor),
weigh the expert's output, or its input (``input_weighted``: Llama 4).
``shared`` experts run on every token beside the routed ones (Qwen2-MoE: one, its output
scaled by sigmoid(x w_gate) with ``shared_gate``; DeepSeek: ungated). A top-1 router may
bound the positions of a sequence an expert takes (``capacity``: Switch Transformers).
gpt-oss biases the router's logits (``router_bias``; softmax over the top_k logits is the
renormalised softmax over all) and the experts' linear layers (``bias``), and clamps its
SwiGLU: the gate at most c, the linear branch within [-c, c], shifted by ``glu_shift`` before
the product (``glu_limit`` 7, ``glu_shift`` 1, gate activation x sigmoid(1.702 x): quick_gelu).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from tfspec.layers.base import Sublayer, register
from tfspec.layers.ffn import Activation
from tfspec.spec.bounds import Width

Experts = Annotated[int, Field(ge=1, le=4096)]


@register
class MixtureOfExperts(Sublayer):
    """top_k of ``experts`` feed-forward networks per position, weighted by a learned router."""

    kind: Literal["moe"] = "moe"
    stem: ClassVar[str] = "moe"
    component: ClassVar[str] = "ffn"
    experts: Experts
    """E, the routed experts (Mixtral 8, Qwen1.5-MoE-A2.7B 60, OLMoE 64)."""
    top_k: Experts = 2
    """Experts each position runs (Mixtral 2, Qwen2-MoE 4, OLMoE 8)."""
    normalize: bool = True
    """Rescale the top_k probabilities to sum to 1 (Mixtral: always; Qwen2-MoE and OLMoE: their
    norm_topk_prob, false by default)."""
    scoring: Literal["softmax", "sigmoid", "sparsemixer"] = "softmax"
    """How the router's logits become scores: softmax over the experts (Mixtral, Qwen2-MoE,
    OLMoE, DeepSeek-V2), a sigmoid each (DeepSeek-V3), or SparseMixer's (PhiMoE, Liu et al. 2024,
    at inference): the top_k experts by logit, the t-th weighted by the softmax over the experts
    not chosen before it whose logit s is near its own s_t, (s_t - s) / max(|s|, s_t) <= 2 x
    ``mixer_eps``; no renormalisation (``normalize`` false)."""
    mixer_eps: Annotated[float, Field(ge=0, le=1e3)] = 0.01
    """SparseMixer's closeness bound (PhiMoE's router_jitter_noise: 0.01); read by it only."""
    score_bias: bool = False
    """A learned bias per expert added to the scores to choose experts, not to weight them
    (DeepSeek-V3's e_score_correction_bias, a buffer transformers does not count: reports show
    it on its own line)."""
    groups: Experts = 1
    """Equal groups of experts; only the top_groups groups whose two best scores sum highest
    are chosen from (DeepSeek-V3's n_group: 8)."""
    top_groups: Experts | None = None
    """Groups each position chooses from (DeepSeek-V3's topk_group: 4); defaults to all."""
    routed_scale: Annotated[float, Field(gt=0, le=1e3)] = 1.0
    """Multiplies the routed experts' weights (DeepSeek-V3's routed_scaling_factor: 2.5)."""
    input_weighted: bool = False
    """Multiply each routed expert's input, not its output, by the expert's weight: expert(p x)
    rather than p expert(x), which differ as an expert is not linear (Llama 4's router scales the
    tokens it sends)."""
    capacity: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Positions of a sequence each expert takes, in order: a position routed to an expert that
    already took ``capacity`` earlier positions of its sequence skips the layer (output 0, the
    residual passes it on). Switch Transformers' expert_capacity (switch-base-8: 64), counted as
    transformers' SwitchTransformersTop1Router counts it, over the positions of one forward call,
    so a decoding step of one position never reaches it. Top-1 routing only; null: no bound."""
    bias: bool = False
    """Biases on each routed expert's linear layers, the linear branch's too when gated (NLLB-MoE's
    fc1 and fc2, gpt-oss's; Mixtral's, Qwen2-MoE's, DeepSeek's and Switch's experts have none)."""
    router_bias: bool = False
    """A learned bias per expert added to the router's logits, choosing and weighting alike
    (gpt-oss's router.bias); unlike ``score_bias``, which only chooses."""
    glu_limit: Annotated[float, Field(gt=0, le=1e6)] | None = None
    """Gated routed experts only: the gate's pre-activation clamped to at most c and the linear branch
    to [-c, c] before they multiply (gpt-oss's swiglu_limit: 7); None: no clamp."""
    glu_shift: Annotated[float, Field(ge=-1e3, le=1e3)] = 0.0
    """Gated routed experts only: added to the linear branch before the product, act(x W1) * (x W3 + s)
    (gpt-oss: 1)."""
    d_ff: Width | None = None
    """Inner size of each routed expert; defaults to the spec's d_ff."""
    shared: Annotated[int, Field(ge=0, le=64)] = 0
    """Experts every position runs besides the routed ones, as one network shared_d_ff wide."""
    shared_d_ff: Width | None = None
    """Inner size of the shared experts together; defaults to shared x d_ff."""
    shared_gate: bool = False
    """Scale the shared experts' output by sigmoid(x w_gate), one learned vector (Qwen2-MoE)."""
    balance: Annotated[float, Field(ge=0, le=1e3)] = 0.01
    """Weight of the load-balancing loss training adds, E x sum_e f_e P_e per token (f_e: the
    share of tokens routed to expert e, P_e: its mean router probability; Switch Transformer's
    alpha = 0.01, transformers' router_aux_loss_coef): it keeps the router from sending every
    token to a few experts. 0: none."""
    z_loss: Annotated[float, Field(ge=0, le=1e3)] = 0.0
    """Weight of the router z-loss, logsumexp(router logits)^2 per token (ST-MoE: 0.001), which
    keeps the router's logits small. 0: none."""
    activation: Activation | None = None
    """Defaults to the spec's activation."""
    gated: bool | None = None
    """Experts as gated linear units (SwiGLU with silu); defaults to the spec's gated."""
    symbols: ClassVar[dict[str, str]] = {"d_ff": "d_ff"}
    apart: ClassVar[dict[str, str]] = {"score_bias": "router score bias"}

    def check(self, spec) -> str | None:
        if self.top_k > self.experts:
            return f"top_k ({self.top_k}) cannot exceed experts ({self.experts}): pick top_k <= experts"
        if self.capacity is not None and self.top_k != 1:
            return (f"capacity ({self.capacity}) bounds top-1 routing (Switch Transformers), but top_k is "
                    f"{self.top_k}: set top_k: 1 or drop capacity")
        if (self.glu_limit is not None or self.glu_shift) and not self.resolved(spec).gated:
            return "glu_limit and glu_shift shape a gated unit's two branches, but gated is false: drop them"
        if self.scoring == "sparsemixer" and (self.normalize or self.groups > 1 or self.score_bias):
            return ("sparsemixer weighs each chosen expert by its own softmax: set normalize: false, groups: 1 "
                    "and score_bias: false")
        if self.shared_gate and not self.shared:
            return "shared_gate scales the shared experts' output, but shared is 0: set shared: 1 or drop it"
        return self._check_groups()

    def _check_groups(self) -> str | None:
        size, top = self.experts // self.groups, self.top_groups or self.groups
        if self.groups > 1 and (self.experts % self.groups or size < 2):
            return (f"experts ({self.experts}) must be divisible by groups ({self.groups}) into groups of at least "
                    "2 (a group scores by its two best experts)")
        if top > self.groups:
            return f"top_groups ({top}) cannot exceed groups ({self.groups})"
        if self.top_k > top * size:
            return (f"top_k ({self.top_k}) cannot exceed the experts of top_groups ({top}) groups of "
                    f"{size}: pick top_k <= {top * size}")
        return None

    def resolved(self, spec) -> MixtureOfExperts:
        if self._filled is not None:
            return self
        inherited = {"d_ff": spec.d_ff, "activation": spec.activation, "gated": spec.gated}
        layer = self.model_copy(update={k: v for k, v in inherited.items() if getattr(self, k) is None})
        if layer.shared and layer.shared_d_ff is None:
            layer = layer.model_copy(update={"shared_d_ff": layer.shared * layer.d_ff})
        layer._filled = frozenset(k for k in (*inherited, "shared_d_ff") if getattr(self, k) is None)
        return layer

    def idle(self, params: dict[str, int]) -> int:
        """The routed experts a token does not run: (E - top_k) / E of w_1, w_2, w_3 and the biases."""
        routed = sum(params.get(role, 0) for role in ("w_1", "w_2", "w_3", "b_1", "b_2", "b_3"))
        return routed * (self.experts - self.top_k) // self.experts

    def flops(self, s, dense=False):
        """Per position: the router (d x E), top_k experts and the shared network, each
        2 (or 3 when gated) d x width products; a token's work, not the E experts' weights."""
        products = 3 if self.gated else 2
        terms = {"router": 2 * s.n * s.d * self.experts, "experts": self.top_k * products * 2 * s.n * s.d * s.d_ff}
        if self.shared:
            terms["shared"] = products * 2 * s.n * s.d * self.shared_d_ff
        if self.shared_gate:
            terms["shared_gate"] = 2 * s.n * s.d
        return terms

    @property
    def mixes_positions(self) -> bool:
        """With ``capacity``, whether an expert still takes a position depends on the positions
        before it in the padded row, padding included: a prompt's logits move with its batch's
        padding. Without it each position is routed alone."""
        return self.capacity is not None

    def lower(self, b, name, x):
        s, layer = b.spec, self.resolved(b.spec)
        d, e, f = s.d_model, layer.experts, layer.d_ff
        params = {"w_router": ((e, d), "xavier_uniform"), "w_1": ((e, f, d), "xavier_uniform"),
                  "w_2": ((e, d, f), "xavier_uniform")}
        if layer.gated:
            params["w_3"] = ((e, f, d), "xavier_uniform")
        if layer.bias:
            params |= {"b_1": ((e, f), "zeros"), "b_2": ((e, d), "zeros")} | ({"b_3": ((e, f), "zeros")}
                                                                             if layer.gated else {})
        if layer.router_bias:
            params["b_router"] = ((e,), "zeros")
        if layer.score_bias:
            params["score_bias"] = ((e,), "zeros")
        if layer.shared:
            g = layer.shared_d_ff
            params |= {"w_shared_1": ((g, d), "xavier_uniform"), "w_shared_2": ((d, g), "xavier_uniform")}
            if layer.gated:
                params["w_shared_3"] = ((g, d), "xavier_uniform")
            if layer.shared_gate:
                params["w_shared_gate"] = ((1, d), "xavier_uniform")
        attrs = {"experts": e, "top_k": layer.top_k, "normalize": layer.normalize, "d_ff": f,
                 "scoring": layer.scoring, "mixer_eps": layer.mixer_eps, "groups": layer.groups,
                 "top_groups": layer.top_groups or layer.groups, "routed_scale": layer.routed_scale,
                 "input_weighted": layer.input_weighted, "capacity": layer.capacity,
                 "balance": layer.balance, "z_loss": layer.z_loss,
                 "activation": layer.activation, "gated": layer.gated, "dropout": s.activation_dropout,
                 "glu_limit": layer.glu_limit, "glu_shift": layer.glu_shift}
        return b.op(name, "moe", [x], attrs=attrs, params=params, layer=layer)
