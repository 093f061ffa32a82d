//! Requests whose `:authority` the HTTP/2 server cannot parse, made
//! acceptable on the unix socket.
//!
//! grpc-core (Python's grpcio, C++, Ruby, PHP…) names a `unix:` target's
//! authority after the socket path, percent-encoded (`tmp%2Fkpng.sock`).
//! The h2 server under tonic refuses every such request with RST_STREAM
//! PROTOCOL_ERROR, since `%` may appear in an authority's user part only.
//! On a unix socket the authority means nothing, so [`FixAuthority`] sits
//! between the socket and the server: it reads the client's HTTP/2 frames,
//! decodes each header block (HPACK, with the client's dynamic table),
//! puts `localhost` (what grpc-go sends) in place of an authority that
//! does not parse, and hands the block on re-encoded without indexing, so
//! the server's own table stays empty. Every other frame passes as it came,
//! streamed, not held; the server's side of the connection is not touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use httlib_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header: length (24 bits), type, flags, stream (RFC 9113 §4.1).
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame every HTTP/2 peer takes (SETTINGS_MAX_FRAME_SIZE's
/// initial value): re-encoded blocks are cut to it.
const FRAME_SIZE: usize = 16_384;
/// SETTINGS_HEADER_TABLE_SIZE's initial value, which the server keeps: the
/// client's encoder may use a dynamic table this large.
const TABLE_SIZE: u32 = 4_096;
/// The largest header block held while its CONTINUATION frames arrive.
const MAX_BLOCK: usize = 1 << 20;
/// What an authority that does not parse becomes.
const LOCALHOST: &[u8] = b"localhost";
/// HPACK's flag for a field that must never be indexed (RFC 7541 §6.2.3).
const NEVER_INDEXED: u8 = 0x8;
/// How much is read from the socket at a time.
const READ_CHUNK: usize = 16_384;

/// A server-side connection whose requests' `:authority` is made
/// parseable (see the module's docs). Writes pass straight through.
pub(crate) struct FixAuthority<S> {
    io: S,
    /// Bytes read from the client, not yet looked at.
    input: BytesMut,
    /// Bytes ready for the server.
    output: BytesMut,
    state: State,
    decoder: Decoder<'static>,
    eof: bool,
}

/// Where in the client's byte stream the reader is.
#[derive(Debug)]
enum State {
    /// Before the connection preface.
    Preface,
    /// At a frame header.
    Frames,
    /// Inside a frame that passes as it is: this many bytes are left.
    Passing(usize),
    /// Inside a header block that waits for its CONTINUATION frames.
    Block(Block),
    /// Not HTTP/2 with prior knowledge: everything passes, and the server
    /// answers it as it would.
    Verbatim,
}

/// A header block being gathered.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

impl<S> FixAuthority<S> {
    /// Wraps a freshly accepted connection.
    pub(crate) fn new(io: S) -> Self {
        Self {
            io,
            input: BytesMut::new(),
            output: BytesMut::new(),
            state: State::Preface,
            decoder: Decoder::with_dynamic_size(TABLE_SIZE),
            eof: false,
        }
    }

    /// Moves what `input` holds as far as it goes; `false` when it needs
    /// more bytes.
    fn step(&mut self) -> io::Result<bool> {
        match &mut self.state {
            State::Verbatim => {
                let moved = !self.input.is_empty();
                self.output.unsplit(self.input.split());
                Ok(moved)
            }
            State::Preface => {
                let have = self.input.len().min(PREFACE.len());
                if self.input[..have] != PREFACE[..have] {
                    self.state = State::Verbatim;
                    return Ok(true);
                }
                if have < PREFACE.len() {
                    return Ok(false);
                }
                self.output.unsplit(self.input.split_to(PREFACE.len()));
                self.state = State::Frames;
                Ok(true)
            }
            State::Passing(left) => {
                if self.input.is_empty() {
                    return Ok(false);
                }
                let n = (*left).min(self.input.len());
                self.output.unsplit(self.input.split_to(n));
                *left -= n;
                if *left == 0 {
                    self.state = State::Frames;
                }
                Ok(true)
            }
            State::Frames | State::Block(_) => self.frame(),
        }
    }

    /// Reads one frame header, and the payload too if it is part of a
    /// header block.
    fn frame(&mut self) -> io::Result<bool> {
        if self.input.len() < FRAME_HEADER {
            return Ok(false);
        }
        let len = usize::from(self.input[0]) << 16
            | usize::from(self.input[1]) << 8
            | usize::from(self.input[2]);
        let kind = self.input[3];
        let flags = self.input[4];
        let stream = u32::from_be_bytes([
            self.input[5] & 0x7f,
            self.input[6],
            self.input[7],
            self.input[8],
        ]);
        let in_block = matches!(self.state, State::Block(_));
        if kind != HEADERS && kind != CONTINUATION {
            if in_block {
                return Err(invalid(format!(
                    "a frame of type {kind} inside stream {stream}'s header block"
                )));
            }
            self.output.unsplit(self.input.split_to(FRAME_HEADER));
            self.state = if len == 0 {
                State::Frames
            } else {
                State::Passing(len)
            };
            return Ok(true);
        }
        if self.input.len() < FRAME_HEADER + len {
            return Ok(false);
        }
        self.input.advance(FRAME_HEADER);
        let payload = self.input.split_to(len);
        let block = match std::mem::replace(&mut self.state, State::Frames) {
            State::Block(mut block) => {
                if kind != CONTINUATION || stream != block.stream {
                    return Err(invalid(format!(
                        "stream {}'s header block cut by a frame of type {kind} on stream {stream}",
                        block.stream
                    )));
                }
                block.fragment.extend_from_slice(&payload);
                block
            }
            _ if kind == CONTINUATION => {
                return Err(invalid(format!(
                    "a CONTINUATION frame on stream {stream} outside a header block"
                )));
            }
            _ => headers(stream, flags, &payload)?,
        };
        if block.fragment.len() > MAX_BLOCK {
            return Err(invalid(format!(
                "stream {stream}'s header block is over {MAX_BLOCK} bytes"
            )));
        }
        if flags & END_HEADERS == 0 {
            self.state = State::Block(block);
        } else {
            self.reencode(block)?;
        }
        Ok(true)
    }

    /// Decodes a whole header block, mends its authority, and writes it on
    /// as HEADERS and CONTINUATION frames.
    fn reencode(&mut self, block: Block) -> io::Result<()> {
        let mut fragment = block.fragment;
        let mut fields = Vec::new();
        self.decoder
            .decode(&mut fragment, &mut fields)
            .map_err(|e| invalid(format!("stream {}: HPACK: {e:?}", block.stream)))?;
        let mut encoder = Encoder::default();
        let mut encoded = Vec::new();
        for (name, mut value, flags) in fields {
            if name == b":authority" && http::uri::Authority::try_from(value.as_slice()).is_err() {
                tracing::debug!(
                    stream = block.stream,
                    authority = %String::from_utf8_lossy(&value),
                    "an authority the server cannot parse is read as localhost"
                );
                value = LOCALHOST.to_vec();
            }
            encoder
                .encode((name, value, flags & NEVER_INDEXED), &mut encoded)
                .map_err(|e| invalid(format!("stream {}: HPACK: {e:?}", block.stream)))?;
        }
        let mut first = true;
        let mut rest = encoded.as_slice();
        loop {
            let room = FRAME_SIZE
                - if first && block.priority.is_some() {
                    5
                } else {
                    0
                };
            let (chunk, after) = rest.split_at(rest.len().min(room));
            let mut flags = if after.is_empty() { END_HEADERS } else { 0 };
            let kind = if first { HEADERS } else { CONTINUATION };
            if first && block.end_stream {
                flags |= END_STREAM;
            }
            let priority = block.priority.filter(|_| first);
            if priority.is_some() {
                flags |= PRIORITY;
            }
            let len = chunk.len() + priority.map_or(0, |p| p.len());
            let len = u32::try_from(len).map_err(|_| invalid("frame too long".into()))?;
            self.output.put_slice(&len.to_be_bytes()[1..]);
            self.output.put_u8(kind);
            self.output.put_u8(flags);
            self.output.put_u32(block.stream);
            if let Some(p) = priority {
                self.output.put_slice(&p);
            }
            self.output.put_slice(chunk);
            first = false;
            rest = after;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }
}

/// The block a HEADERS frame starts: its padding and priority taken off.
fn headers(stream: u32, flags: u8, payload: &[u8]) -> io::Result<Block> {
    let bad = || {
        invalid(format!(
            "stream {stream}: a HEADERS frame shorter than its padding"
        ))
    };
    let mut body = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&n, after) = body.split_first().ok_or_else(bad)?;
        pad = usize::from(n);
        body = after;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        let (p, after) = body.split_first_chunk::<5>().ok_or_else(bad)?;
        priority = Some(*p);
        body = after;
    }
    let end = body.len().checked_sub(pad).ok_or_else(bad)?;
    Ok(Block {
        stream,
        end_stream: flags & END_STREAM != 0,
        priority,
        fragment: body[..end].to_vec(),
    })
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl<S: AsyncRead + Unpin> AsyncRead for FixAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.step()? {
                continue;
            }
            if this.eof {
                // A frame cut short by the end: the server sees it as sent.
                if this.input.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.state = State::Verbatim;
                continue;
            }
            // On the stack: a buffer per connection would be resident for
            // every idle one (16 KiB of the ~24 KiB each cost).
            let mut chunk = [0; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => this.eof = true,
                Poll::Ready(Ok(())) => this.input.extend_from_slice(read.filled()),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FixAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::AsyncReadExt;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = u32::try_from(payload.len()).unwrap().to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// A request's header block as grpc-core encodes it: Huffman strings,
    /// the authority indexed into the dynamic table.
    fn request_block(encoder: &mut Encoder<'_>, authority: &[u8]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value, flags) in [
            (&b":method"[..], &b"POST"[..], 0x10),
            (b":scheme", b"http", 0x10),
            (b":path", b"/kpng.model.v1.Enls/Watch", 0x2 | 0x4),
            (b":authority", authority, 0x1 | 0x2 | 0x4),
            (b"te", b"trailers", 0x4),
            (b"authorization", b"secret", 0x8),
        ] {
            encoder
                .encode((name.to_vec(), value.to_vec(), flags), &mut block)
                .unwrap();
        }
        block
    }

    /// The client's bytes: preface, settings, a request in HEADERS and
    /// CONTINUATION frames (padded, with priority), its data, and a second
    /// request whose authority comes from the dynamic table.
    fn client_bytes() -> Vec<u8> {
        let mut encoder = Encoder::default();
        let first = request_block(&mut encoder, b"tmp%2Fkpng.sock");
        let second = request_block(&mut encoder, b"tmp%2Fkpng.sock");
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        let (a, b) = first.split_at(first.len() / 2);
        let mut headers = vec![3];
        headers.extend([0, 0, 0, 0, 16]);
        headers.extend(a);
        headers.extend([0, 0, 0]);
        out.extend(frame(HEADERS, PADDED | PRIORITY, 1, &headers));
        out.extend(frame(CONTINUATION, END_HEADERS, 1, b));
        out.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\x02\x0a\x00"));
        out.extend(frame(HEADERS, END_HEADERS, 3, &second));
        out.extend(frame(0x8, 0, 0, &[0, 0, 1, 0]));
        out
    }

    /// A frame as the server reads it, its header block decoded.
    struct Seen {
        kind: u8,
        flags: u8,
        stream: u32,
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        payload: Vec<u8>,
    }

    /// Splits a server's input into frames, decoding header blocks.
    fn frames(mut bytes: &[u8]) -> Vec<Seen> {
        assert_eq!(&bytes[..24], PREFACE);
        bytes = &bytes[24..];
        let mut decoder = Decoder::with_dynamic_size(TABLE_SIZE);
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len =
                usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            let (kind, flags) = (bytes[3], bytes[4]);
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
            let payload = bytes[9..9 + len].to_vec();
            bytes = &bytes[9 + len..];
            let mut fields = Vec::new();
            if kind == HEADERS {
                let mut block = payload.clone();
                if flags & PRIORITY != 0 {
                    block.drain(..5);
                }
                let mut decoded = Vec::new();
                decoder.decode(&mut block, &mut decoded).unwrap();
                fields = decoded.into_iter().map(|(n, v, _)| (n, v)).collect();
            }
            out.push(Seen {
                kind,
                flags,
                stream,
                fields,
                payload,
            });
        }
        out
    }

    /// A client that sends its bytes in the given pieces, one a read.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let pieces = &mut self.get_mut().0;
            if let Some(mut piece) = pieces.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    pieces.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    async fn through(chunks: Vec<Vec<u8>>) -> io::Result<Vec<u8>> {
        let mut fixed = FixAuthority::new(Pieces(chunks.into()));
        let mut out = Vec::new();
        fixed.read_to_end(&mut out).await?;
        Ok(out)
    }

    fn authority(fields: &[(Vec<u8>, Vec<u8>)]) -> &[u8] {
        &fields.iter().find(|(n, _)| n == b":authority").unwrap().1
    }

    #[tokio::test]
    async fn a_percent_encoded_authority_becomes_localhost_and_the_rest_passes() {
        let out = through(vec![client_bytes()]).await.unwrap();
        let frames = frames(&out);
        let kinds: Vec<_> = frames.iter().map(|f| (f.kind, f.stream)).collect();
        assert_eq!(
            kinds,
            [(0x4, 0), (HEADERS, 1), (0x0, 1), (HEADERS, 3), (0x8, 0)]
        );
        let Seen { flags, fields, .. } = &frames[1];
        assert_eq!(
            *flags,
            END_HEADERS | PRIORITY,
            "padding dropped, priority kept"
        );
        assert_eq!(authority(fields), b"localhost");
        assert_eq!(
            authority(&frames[3].fields),
            b"localhost",
            "from the client's table"
        );
        let path = &fields.iter().find(|(n, _)| n == b":path").unwrap().1;
        assert_eq!(path, b"/kpng.model.v1.Enls/Watch");
        assert!(
            fields
                .iter()
                .any(|(n, v)| n == b"authorization" && v == b"secret")
        );
        assert_eq!(
            frames[2].payload, b"\0\0\0\0\x02\x0a\x00",
            "data passes as sent"
        );
    }

    #[tokio::test]
    async fn a_parseable_authority_is_kept_and_other_protocols_pass() {
        let mut encoder = Encoder::default();
        let block = request_block(&mut encoder, b"localhost:50051");
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
        let out = through(vec![bytes]).await.unwrap();
        let frames = frames(&out);
        assert_eq!(authority(&frames[0].fields), b"localhost:50051");
        assert_eq!(frames[0].flags, END_HEADERS | END_STREAM);

        let http1 = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec();
        assert_eq!(through(vec![http1.clone()]).await.unwrap(), http1);
    }

    #[tokio::test]
    async fn a_large_block_is_cut_into_frames_the_server_takes() {
        let mut encoder = Encoder::default();
        let mut block = request_block(&mut encoder, b"tmp%2Fkpng.sock");
        let big = vec![b'x'; 40_000];
        encoder
            .encode((b"x-big".to_vec(), big.clone(), 0x0), &mut block)
            .unwrap();
        let mut bytes = PREFACE.to_vec();
        let (a, b) = block.split_at(10_000);
        bytes.extend(frame(HEADERS, 0, 1, a));
        bytes.extend(frame(CONTINUATION, END_HEADERS, 1, b));
        let out = through(vec![bytes]).await.unwrap();
        let mut rest = &out[24..];
        let mut joined = Vec::new();
        let mut kinds = Vec::new();
        while !rest.is_empty() {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            assert!(len <= FRAME_SIZE);
            kinds.push((rest[3], rest[4] & END_HEADERS != 0));
            joined.extend(&rest[9..9 + len]);
            rest = &rest[9 + len..];
        }
        assert_eq!(
            kinds,
            [
                (HEADERS, false),
                (CONTINUATION, false),
                (CONTINUATION, true)
            ]
        );
        let mut fields = Vec::new();
        Decoder::default().decode(&mut joined, &mut fields).unwrap();
        assert!(
            fields
                .iter()
                .any(|(n, v, _)| n == b":authority" && v == b"localhost")
        );
        assert!(fields.iter().any(|(n, v, _)| n == b"x-big" && *v == big));
    }

    #[tokio::test]
    async fn a_broken_block_is_an_error_naming_the_stream() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 0, 5, &[0x82]));
        bytes.extend(frame(0x0, 0, 5, b"x"));
        let err = through(vec![bytes]).await.unwrap_err();
        assert!(err.to_string().contains("stream 5"), "{err}");

        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, END_HEADERS, 7, &[0xff, 0xff, 0xff, 0x7f]));
        let err = through(vec![bytes]).await.unwrap_err();
        assert!(err.to_string().contains("stream 7: HPACK"), "{err}");
    }

    proptest! {
        /// However the client's bytes arrive, the server reads the same.
        #[test]
        fn any_split_of_the_input_reads_the_same(cuts in proptest::collection::vec(0..1000usize, 0..12)) {
            let bytes = client_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % bytes.len()).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut chunks = Vec::new();
            let mut at = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                if cut > at {
                    chunks.push(bytes[at..cut].to_vec());
                    at = cut;
                }
            }
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let whole = runtime.block_on(through(vec![bytes.clone()])).unwrap();
            let split = runtime.block_on(through(chunks)).unwrap();
            prop_assert_eq!(whole, split);
        }
    }
}
