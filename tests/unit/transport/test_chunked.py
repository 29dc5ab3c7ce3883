"""A chunked body's framing taken off across reads (transport/chunked.py)."""

import pytest

from loadtest.transport.chunked import Chunks

BODY = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n"


def _take(reads: list[bytes]) -> tuple[Chunks, bytearray, list[int]]:
    chunks, buf, gots = Chunks(), bytearray(), []
    for data in reads:
        gots.append(chunks.take(data, buf))
        if chunks.ended or chunks.failure:
            break
    return chunks, buf, gots


def test_a_body_read_whole_is_its_chunks_data_extensions_and_trailers_passed_over():
    chunks, buf, gots = _take([BODY])
    assert (bytes(buf), gots, chunks.ended, chunks.extra) == (b"hello world", [11], True, False)


def test_a_body_read_a_byte_at_a_time_keeps_each_data_byte_as_it_comes():
    chunks, buf, gots = _take([BODY[i : i + 1] for i in range(len(BODY))])
    assert bytes(buf) == b"hello world" and chunks.ended
    # "5\r\nhello\r\n" is bytes 0..9 and "6;ext=1\r\n" 10..18: data at 3..7 and 19..24
    assert [i for i, g in enumerate(gots) if g] == [*range(3, 8), *range(19, 25)]
    assert sum(gots) == 11


def test_between_chunks_is_said_only_where_a_whole_chunk_may_come_next():
    chunks, buf = Chunks(), bytearray()
    assert chunks.between
    chunks.take(b"5\r\nhel", buf)
    assert not chunks.between and chunks.need == 2
    chunks.take(b"lo\r", buf)
    assert not chunks.between and chunks.crlf == 1
    chunks.take(b"\n", buf)
    assert chunks.between
    chunks.take(b"0\r\n", buf)
    assert not chunks.between  # trailers to their blank line


def test_bytes_past_the_end_are_said():
    chunks, _, _ = _take([b"0\r\n\r\nHTTP/1.1 200 OK"])
    assert chunks.ended and chunks.extra


@pytest.mark.parametrize(
    ("reads", "failure"),
    [
        ([b"zz\r\n"], "a chunk size that is no number: b'zz\\r'"),
        ([b"-5\r\n"], "a negative chunk size"),
        ([b"1" * 4000, b"1" * 100], "a chunk line past 4 KiB"),
    ],
)
def test_bad_framing_is_said_and_the_data_before_it_kept(reads, failure):
    chunks, buf, _ = _take([b"2\r\nok\r\n", *reads])
    assert (chunks.failure, bytes(buf)) == (failure, b"ok")
