"""qim/server/unmask.py unmasks exactly as autobahn's own masker does, whole or in pieces
(a frame's payload split across TCP reads continues the mask), and only frames under
LARGE_FRAME take it. Real autobahn in this process; every socket test drives it through
real nodes (qim/asgi.py installs it)."""

from __future__ import annotations

import os
import random

import autobahn.websocket.protocol as protocol
from autobahn.nvx._xormasker import create_xor_masker as native

from qim.server.unmask import LARGE_FRAME, IntXorMasker, install

install()
install()  # a second call changes nothing


def test_it_unmasks_as_autobahn_does_whole_and_in_pieces() -> None:
    rng = random.Random(22)
    for size in [0, 1, 3, 4, 5, 7, 125, 126, 127, 128, 129, 1000, 4095, LARGE_FRAME - 1]:
        mask, payload = os.urandom(4), os.urandom(size)
        ours, theirs = IntXorMasker(mask), native(mask, size)
        assert ours.process(payload) == theirs.process(payload)
        assert ours.pointer() == theirs.pointer() == size
        cuts = sorted(rng.sample(range(size + 1), min(size + 1, 4)))
        ours.reset()
        pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, size])]
        assert b"".join(ours.process(piece) for piece in pieces) == native(mask, size).process(payload)
        assert ours.process(ours_twice := b"") == ours_twice


def test_small_frames_take_it_and_large_ones_autobahns() -> None:
    mask = os.urandom(4)
    assert isinstance(protocol.create_xor_masker(mask, 200), IntXorMasker)
    assert not isinstance(protocol.create_xor_masker(mask, LARGE_FRAME), IntXorMasker)
    assert not isinstance(protocol.create_xor_masker(mask), IntXorMasker)
    payload = os.urandom(LARGE_FRAME)
    assert protocol.create_xor_masker(mask, LARGE_FRAME).process(payload) == native(mask, LARGE_FRAME).process(payload)
