"""Images as sequences (the Image Transformer, Parmar et al. 2018, §3-4): a decoder-only spec with
an ``image`` learns p(x) intensity by intensity, reported in bits per dimension.

The reader turns a directory from ``tfspec data images`` into training sequences (``images.
image_pairs``: each image after bos, and labelled ones after their class token too); from then
on it is the language-modelling loop, its nll per token read as nats per intensity.
"""

from __future__ import annotations

import math
from pathlib import Path

from tfspec.errors import TfspecError

from ...images import check_image, image_pairs
from . import misfit, task
from .text import Tokens, TrainConfig


@task("images")
class Images(Tokens):
    trains = "a decoder-only spec with an image"
    reads = "images (`tfspec data images`)"

    @staticmethod
    def fits(spec) -> bool:
        return spec.family == "decoder-only" and spec.image is not None

    @classmethod
    def holds(cls, data: Path) -> bool:
        from tfspec.data.images import image_manifest

        try:
            return image_manifest(data) is not None
        except TfspecError:
            return False

    @classmethod
    def read(cls, spec, config: TrainConfig, data: Path | None, run: Path, **_):
        """The task on the train split of an image directory whose images the spec's ``image`` describes."""
        from tfspec.data.images import image_manifest, load_split

        manifest = image_manifest(data) if data is not None else None
        if manifest is None:
            raise misfit(spec, cls, data, f"{data}: no image manifest" if data else "no --data")
        check_image(spec, manifest)
        sequence = spec.image.positions + 1
        if config.batch_tokens < sequence:
            raise TfspecError(f"--batch-tokens {config.batch_tokens} holds no image of {sequence} tokens; use at "
                              f"least {sequence}")
        pixels, labels, _ = load_split(data, "train")
        made = cls(spec, config, image_pairs(spec, pixels, labels, len(manifest["classes"] or [])))
        made.data, made.images, made.manifest = data, len(pixels), manifest
        made.record = {"data": str(data.resolve()), "images": manifest["name"], "classes": manifest["classes"]}
        return made

    def describe(self, device) -> str:
        labelled = ", each after its class token and after bos" if self.manifest["classes"] else ""
        per_batch = self.config.batch_tokens // (self.spec.image.positions + 1)
        return (f"{self.spec.name}: training on {len(self.pairs):,} sequences ({self.images:,} "
                f"{self.manifest['name']} images{labelled}) on {device}, {per_batch} images per batch")

    def summary(self, last: dict, run: Path) -> str:
        return (f"step {last['step']}: train {last['nll'] / math.log(2):.3f} bits/dim, "
                f"{last['tokens_per_s']:,.0f} tokens/s, {last['seconds']:.0f}s; checkpoints in {run / 'checkpoints'}")
