"""Images -> pixel values as an image model reads them: transformers' image preprocessing
(``ViTImageProcessor``, DeiT's and DINOv2's processors, as their PIL backend computes it), in
numpy and Pillow, read from a checkpoint's ``preprocessor_config.json``.

The steps, in transformers' order: resize with Pillow's filter the configuration names (ViT:
bilinear to 224 x 224; DeiT and DINOv2: bicubic, the shortest edge to 256), centre-crop (DeiT,
DINOv2: 224 x 224), rescale (x 1/255, in float64, then float32), normalise with the mean and
standard deviation per channel, channels first. A setting tfspec does not compute (padding,
other sizes' forms) is refused by name, never approximated.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import json_object

PREPROCESSOR = "preprocessor_config.json"
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
"""PIL's filter codes (``PIL.Image.Resampling``), as configurations store ``resample``."""
BOOKKEEPING = {"image_processor_type", "feature_extractor_type", "processor_class", "do_convert_rgb",
               "default_to_square", "data_format", "input_data_format", "do_reduce_labels"}
"""Keys that change nothing here (``do_convert_rgb``: the images read are RGB already;
``do_reduce_labels``: BEiT's processor shifts segmentation maps' labels, no pixels)."""


@dataclass(frozen=True)
class Preprocessing:
    """One processor's settings. ``size``: (height, width), or None with ``shortest_edge``."""

    size: tuple[int, int] | None = (224, 224)
    shortest_edge: int | None = None
    resample: int = 2
    do_resize: bool = True
    do_center_crop: bool = False
    crop_size: tuple[int, int] = (224, 224)
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)

    @classmethod
    def from_config(cls, config: dict, where: str) -> Preprocessing:
        """The settings of a ``preprocessor_config.json``; an unknown key or a form of ``size`` tfspec
        does not compute is one error naming it."""
        known = set(cls.__dataclass_fields__) | BOOKKEEPING
        for key, value in config.items():
            if key not in known and not (key == "do_pad" and value is False):
                raise TfspecError(f"{where}: {key} is not supported in image preprocessing ({json.dumps(value)[:60]})")
        values = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        if "size" in config:
            values |= _size(config["size"], "size", where)
        if "crop_size" in config:
            crop = _size(config["crop_size"], "crop_size", where)
            values["crop_size"] = crop.get("size") or (crop["shortest_edge"],) * 2
        if values.get("resample", 2) not in RESAMPLE:
            raise TfspecError(f"{where}: resample: {values['resample']} is not one of PIL's filters {sorted(RESAMPLE)}")
        for key in ("image_mean", "image_std"):
            if key in values:
                values[key] = tuple(float(v) for v in np.atleast_1d(values[key]))
        return cls(**values)

    @classmethod
    def read(cls, directory: Path) -> Preprocessing:
        path = Path(directory) / PREPROCESSOR
        if not path.is_file():
            raise TfspecError(f"{directory}: no {PREPROCESSOR}: say how images are prepared for this model")
        return cls.from_config(json_object(path, "image processor settings"), str(path))

    def __call__(self, image) -> np.ndarray:
        """(height, width, channels) uint8 (or a PIL image) -> (channels, H, W) float32 pixel values."""
        from PIL import Image

        array = np.asarray(image)
        if array.dtype != np.uint8 or array.ndim != 3:
            raise TfspecError(f"an image must be (height, width, channels) uint8, got {array.dtype} {array.shape}")
        if self.do_resize:
            height, width = self._resized(*array.shape[:2])
            array = np.asarray(Image.fromarray(array).resize((width, height), resample=self.resample))
        if self.do_center_crop:
            array = _center_crop(array, *self.crop_size)
        x = (array.astype(np.float64) * self.rescale_factor).astype(np.float32) if self.do_rescale \
            else array.astype(np.float32)
        if self.do_normalize:
            x = (x - np.array(self.image_mean, dtype=np.float32)) / np.array(self.image_std, dtype=np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1))

    def batch(self, images) -> np.ndarray:
        """(B, channels, H, W) of equally sized results."""
        return np.stack([self(image) for image in images])

    def _resized(self, height: int, width: int) -> tuple[int, int]:
        if self.size is not None:
            return self.size
        short, long = sorted((height, width))
        edge = (self.shortest_edge, int(self.shortest_edge * long / short))  # transformers floors the long side
        return edge if height <= width else edge[::-1]


def _size(value, key: str, where: str) -> dict:
    """``{"height", "width"}`` -> size; ``{"shortest_edge"}`` -> shortest_edge; an int -> square."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"size": (value, value), "shortest_edge": None}
    if isinstance(value, dict) and set(value) == {"height", "width"}:
        return {"size": (int(value["height"]), int(value["width"])), "shortest_edge": None}
    if isinstance(value, dict) and set(value) == {"shortest_edge"}:
        return {"size": None, "shortest_edge": int(value["shortest_edge"])}
    raise TfspecError(f"{where}: {key}: {json.dumps(value)[:60]} is not supported; tfspec resizes to "
                      "{height, width} or the shortest_edge")


def _center_crop(array: np.ndarray, height: int, width: int) -> np.ndarray:
    """The centre (height, width) window, zero-padded first where the image is smaller
    (transformers' ``center_crop``)."""
    h, w = array.shape[:2]
    if h < height or w < width:
        padded = np.zeros((max(h, height), max(w, width), array.shape[2]), dtype=array.dtype)
        top, left = math.ceil((padded.shape[0] - h) / 2), math.ceil((padded.shape[1] - w) / 2)
        padded[top:top + h, left:left + w] = array
        array, h, w = padded, *padded.shape[:2]
    top, left = (h - height) // 2, (w - width) // 2
    return array[top:top + height, left:left + width]


def read_image(path: Path, mode: str = "RGB", instead: str = "") -> np.ndarray:
    """The pixels of an image file (any format Pillow reads) in PIL ``mode`` (RGB: (h, w, 3) uint8;
    L: (h, w)). A missing file stays FileNotFoundError; anything else Pillow refuses, a
    decompression bomb included, is one error naming the file. ``instead``: what the caller takes
    without pillow, said where it is missing."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise TfspecError(f"{path}: reading images needs pillow: pip install 'tfspec[images]'{instead}") from None
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert(mode))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise TfspecError(f"{path}: not a readable image ({str(e).splitlines()[0][:200]})") from None
