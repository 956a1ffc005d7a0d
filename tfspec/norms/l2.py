"""ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", §2.2): each position's
features divided by their L2 norm and multiplied by one learned scalar g,
g * x / max(||x||_2, eps), which projects onto a sphere of radius g. g starts at sqrt(d) (the
paper's initialisation, so the output has the root mean square of a unit-variance vector).
x-transformers' ``use_scalenorm`` computes the same function as sqrt(d) * gamma * x / ||x||
with gamma starting at 1 (its parameter is ours over sqrt(d)); tfspec follows the paper's g."""

from __future__ import annotations

from tfspec.norms import NormKind, register


@register
class L2(NormKind):
    name, order, op = "l2", 20, "l2_norm"
    summary = ("ScaleNorm (Nguyen & Salazar 2019), g * x / max(||x||_2, eps) with one learned scalar g "
               "starting at sqrt(d_model), no bias.")

    @classmethod
    def params(cls, spec, width: int) -> dict:
        return {"gain": ((1,), f"constant:{width ** 0.5!r}")}

    @classmethod
    def problem(cls, spec):
        if not spec.norm_gain:  # which radius is left is not the paper's to say: refuse, not guess
            return "norm_gain", ("norm_type l2 (ScaleNorm) has one parameter, its gain g; norm_gain: false "
                                 "would leave the radius unstated: drop norm_gain or use norm_type: rms")
        return super().problem(spec)
