"""Synthetic media: seeded, real files, rendered before t0 within a budget, and cycled past it."""

from __future__ import annotations

import base64
import io
import random
import wave

import pytest

from loadtest.config.content import Audio, Images
from loadtest.workload.media import MAX_SETS, MediaSet, render_wav

PIL = pytest.importorskip("PIL.Image")


def test_each_request_gets_its_own_images_up_to_the_limit_then_they_cycle():
    media = MediaSet(Images(count=1, width=8, height=8, format="jpeg"), None, seed=3)
    media.render(10_000)
    assert len(media.sets) == MAX_SETS
    assert media.for_request(MAX_SETS + 1) is media.sets[1]
    urls = {s.parts[0]["image_url"]["url"] for s in media.sets[:50]}
    assert len(urls) == 50  # distinct pictures
    again = MediaSet(Images(count=1, width=8, height=8, format="jpeg"), None, seed=3)
    again.render(2)
    assert again.sets[1] == media.sets[1]  # seeded: the same run, the same pictures
    url = media.sets[0].parts[0]["image_url"]["url"]
    image = PIL.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert (image.format, image.size) == ("JPEG", (8, 8))
    assert media.describe()["image_size"] == "8x8 jpeg"


def test_a_wav_clip_has_the_length_and_rate_asked():
    data = render_wav(Audio(seconds=0.25, sample_rate=16000), random.Random(1))
    clip = wave.open(io.BytesIO(data))
    assert (clip.getnchannels(), clip.getsampwidth(), clip.getframerate()) == (1, 2, 16000)
    assert clip.getnframes() == 4000 and len(data) == 44 + 2 * 4000
