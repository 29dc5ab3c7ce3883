"""Seeded synthetic images and audio, encoded as a client sends them: PNG or JPEG bytes
(Pillow, the ``media`` extra) in ``image_url`` data URIs, 16-bit mono WAV (the standard
library) as ``input_audio``.

Images are a gradient with seeded shapes on it, not noise: they compress like pictures do, so
their byte sizes are a photo's or a screenshot's, not an incompressible worst case. Rendering
takes milliseconds an image, so every set is rendered before t0 (``MediaSet.render``), up to
``MAX_SETS`` and ``MAX_MEDIA_BYTES``; a run with more requests cycles through the sets it
rendered, and the result says how many distinct ones there were.
"""

from __future__ import annotations

import base64
import io
import random
import wave
from dataclasses import dataclass

from loadtest.config.content import Audio, Images
from loadtest.core.errors import ScenarioError

MAX_MEDIA_BYTES = 256 << 20  # of base64 text held for a run's requests
# sets rendered at most (a 512x512 PNG takes ~90 ms here, a JPEG ~10 ms: 512 PNGs ~45 s
# before t0), and for a closed loop with no request count
MAX_SETS = 512
MEDIA_SETS_OPEN_ENDED = 256


@dataclass(frozen=True)
class MediaParts:
    """One request's media: its chat content parts and the bytes each kind took."""

    parts: tuple[dict, ...]
    image_bytes: int
    audio_bytes: int


def require_pillow() -> None:
    """``ScenarioError`` unless Pillow (the ``media`` extra) is installed."""
    import importlib.util

    if importlib.util.find_spec("PIL") is None:
        raise ScenarioError(
            ["workload.images: synthetic images need Pillow: pip install 'llm-loadtest[media]'"]
        )


class MediaSet:
    """The media of a run's requests, seeded: set ``i`` of ``render(n)`` goes with request
    ``i`` (cycling where fewer were rendered than requests)."""

    def __init__(self, images: Images | None, audio: Audio | None, seed: int) -> None:
        self.images, self.audio, self.seed = images, audio, seed
        self.sets: list[MediaParts] = []

    def render(self, requests: int) -> None:
        """Render the sets for ``requests`` requests (as many as the memory budget holds)."""
        first = self._one(0)
        size = max(1, sum(len(str(p)) for p in first.parts))
        count = max(1, min(requests, MAX_SETS, MAX_MEDIA_BYTES // size))
        self.sets = [first] + [self._one(i) for i in range(1, count)]

    def for_request(self, index: int) -> MediaParts:
        if not self.sets:
            self.render(1)
        return self.sets[index % len(self.sets)]

    def describe(self) -> dict:
        """What each request carried: counts, sizes, mean encoded bytes, distinct sets."""
        n = len(self.sets) or 1
        out: dict = {}
        if self.images is not None:
            im = self.images
            out.update(
                images_per_request=im.count,
                image_size=f"{im.width}x{im.height} {im.format}",
                image_bytes_mean=sum(s.image_bytes for s in self.sets) / n / im.count,
            )
        if self.audio is not None:
            out.update(
                audio_per_request=self.audio.count,
                audio_seconds=self.audio.seconds,
                audio_bytes_mean=sum(s.audio_bytes for s in self.sets) / n / self.audio.count,
            )
        return out

    def _one(self, index: int) -> MediaParts:
        rng = random.Random(f"{self.seed}/{index}")
        parts: list[dict] = []
        image_bytes = audio_bytes = 0
        if self.images is not None:
            for _ in range(self.images.count):
                data = render_image(self.images, rng)
                image_bytes += len(data)
                mime = "image/png" if self.images.format == "png" else "image/jpeg"
                url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
        if self.audio is not None:
            for _ in range(self.audio.count):
                data = render_wav(self.audio, rng)
                audio_bytes += len(data)
                parts.append(
                    {
                        "type": "input_audio",
                        "input_audio": {
                            "data": base64.b64encode(data).decode("ascii"),
                            "format": "wav",
                        },
                    }
                )
        return MediaParts(tuple(parts), image_bytes, audio_bytes)


def render_image(spec: Images, rng: random.Random) -> bytes:
    """A ``spec.width`` x ``spec.height`` picture: a seeded gradient with seeded shapes and
    grain."""
    from PIL import Image, ImageDraw

    w, h = spec.width, spec.height
    top = tuple(rng.randrange(256) for _ in range(3))
    bottom = tuple(rng.randrange(256) for _ in range(3))
    column = Image.linear_gradient("L").resize((1, h))
    image = Image.composite(
        Image.new("RGB", (w, h), bottom), Image.new("RGB", (w, h), top), column.resize((w, h))
    )
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(4, 12)):
        x0, x1 = sorted(rng.randrange(w + 1) for _ in range(2))
        y0, y1 = sorted(rng.randrange(h + 1) for _ in range(2))
        fill = tuple(rng.randrange(256) for _ in range(3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x0, y0, x1, y1), fill=fill)
    # grain, as a camera's: without it flat regions compress to a few kB, unlike a photo
    import numpy as np

    pixels = np.asarray(image, dtype=np.int16)
    grain = np.random.default_rng(rng.getrandbits(64)).integers(-6, 7, pixels.shape)
    image = Image.fromarray(np.clip(pixels + grain, 0, 255).astype(np.uint8), "RGB")
    out = io.BytesIO()
    if spec.format == "png":
        image.save(out, format="PNG", compress_level=1)
    else:
        image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def render_wav(spec: Audio, rng: random.Random) -> bytes:
    """``spec.seconds`` of 16-bit mono WAV: a seeded chord of tones with some noise."""
    import numpy as np

    n = max(1, round(spec.seconds * spec.sample_rate))
    t = np.arange(n) / spec.sample_rate
    noise = np.random.default_rng(rng.getrandbits(64))
    signal = sum(
        np.sin(2 * np.pi * rng.uniform(110, 880) * t + rng.uniform(0, 6.3)) for _ in range(3)
    )
    signal = signal / 3 * 0.6 + noise.normal(0, 0.05, n)
    pcm = (np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(spec.sample_rate)
        wav.writeframes(pcm)
    return out.getvalue()
