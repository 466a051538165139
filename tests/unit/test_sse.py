"""The SSE decoder: raw bytes in, data payloads out, whatever the read boundaries."""

from loadgen.backends.sse import SSEDecoder


def feed_all(parts):
    dec = SSEDecoder()
    out = []
    for p in parts:
        out.extend(dec.feed(p))
    return out, dec


class TestSSEDecoder:
    def test_one_event_per_read(self):
        """Each complete `data:` event comes out as its payload, without the prefix or space."""
        out, _ = feed_all([b'data: {"a":1}\n\n', b"data: [DONE]\n\n"])
        assert out == [b'{"a":1}', b"[DONE]"]

    def test_event_split_across_reads(self):
        """An event cut anywhere between reads is emitted once, when its blank line arrives."""
        raw = b'data: {"x":"hello"}\n\ndata: {"x":"world"}\n\n'
        for cut in range(1, len(raw)):
            out, _ = feed_all([raw[:cut], raw[cut:]])
            assert out == [b'{"x":"hello"}', b'{"x":"world"}'], cut

    def test_many_events_in_one_read(self):
        """A read holding several events (a busy server, or a slow client) yields all of them."""
        out, _ = feed_all([b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4"])
        assert out == [b"1", b"2", b"3"]

    def test_crlf_line_endings_even_when_split(self):
        """CRLF endings work, including a CR at the end of one read and its LF in the next."""
        out, _ = feed_all([b"data: a\r\n\r", b"\ndata: b\r\n\r\n"])
        assert out == [b"a", b"b"]

    def test_comments_and_other_fields_are_skipped(self):
        """Keep-alive comments, event/id/retry fields carry no data and produce nothing."""
        out, dec = feed_all([b": ping\n\n", b"event: message\nid: 7\ndata: x\n\n", b"retry: 10\n\n"])
        assert out == [b"x"]
        assert dec.junk == 0

    def test_multiline_data_is_joined(self):
        """Several data lines in one event join with a newline, as the SSE spec says."""
        out, _ = feed_all([b"data: line1\ndata: line2\n\n"])
        assert out == [b"line1\nline2"]

    def test_data_without_space(self):
        """`data:x` (no space after the colon) is valid SSE."""
        out, _ = feed_all([b"data:x\n\n"])
        assert out == [b"x"]

    def test_non_sse_body_is_counted_as_junk(self):
        """Lines that are no SSE field are counted, so the backend can call the stream malformed."""
        out, dec = feed_all([b"<html>502 Bad Gateway</html>\n\n"])
        assert out == []
        assert dec.junk == 1
        assert dec.junk_sample == b"<html>502 Bad Gateway</html>"

    def test_flush_returns_unterminated_last_event(self):
        """A last event with no blank line after it is recovered when the stream closes."""
        out, dec = feed_all([b"data: a\n\ndata: [DONE]\n"])
        assert out == [b"a"]
        assert dec.flush() == [b"[DONE]"]
