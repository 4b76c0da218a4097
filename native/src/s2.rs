//! The S2 stream codec compressed server-to-server links run (klauspost/compress's
//! format, which nats-server uses for leafnode and route compression); the pure
//! `ingest/parser/s2.py` is the reference and the fallback.
//!
//! A stream is chunks: a 4-byte header (type, 24-bit little-endian length), then for
//! data chunks a masked CRC-32C of the decoded bytes and the body. The encoder writes
//! Snappy-compatible blocks (literals and copies with 1- and 2-byte offsets), which
//! every S2 reader takes; the decoder also reads S2's extensions the reference's
//! writers produce: copies with 4-byte offsets, blocks up to 4 MiB, and repeat codes
//! (a 1-byte-offset copy with offset 0 reuses the previous copy's offset).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

const MAGIC: &[u8] = b"\xff\x06\x00\x00S2sTwO";
const MAGIC_BODY: &[u8] = b"S2sTwO";
const SNAPPY_BODY: &[u8] = b"sNaPpY";
/// What one chunk of this encoder holds: Snappy's block size keeps every offset in 16 bits.
const BLOCK: usize = 1 << 16;
/// The largest block an S2 stream may carry.
const MAX_BLOCK: usize = 4 << 20;
const SNAPPY_MAX_BLOCK: usize = 1 << 16;
const HASH_BITS: u32 = 14;

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

fn crc_bytes(mut c: u32, data: &[u8]) -> u32 {
    for &b in data {
        c = CRC_TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    c
}

/// The CPU's CRC-32C instruction, eight bytes at a time (SSE 4.2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc_sse42(mut c: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    let mut words = data.chunks_exact(8);
    let mut wide = c as u64;
    for word in &mut words {
        wide = _mm_crc32_u64(wide, u64::from_le_bytes(word.try_into().unwrap()));
    }
    c = wide as u32;
    crc_bytes(c, words.remainder())
}

fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the feature was detected at run time.
            return !unsafe { crc_sse42(!0, data) };
        }
    }
    !crc_bytes(!0, data)
}

/// CRC-32C (Castagnoli), masked as the framing format stores it.
pub fn masked_crc(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn emit_literal(out: &mut Vec<u8>, lit: &[u8]) {
    let n = lit.len() - 1;
    if n < 60 {
        out.push((n as u8) << 2);
    } else {
        let bytes = (n as u32).to_le_bytes();
        let width = if n < 1 << 8 {
            1
        } else if n < 1 << 16 {
            2
        } else if n < 1 << 24 {
            3
        } else {
            4
        };
        out.push(((59 + width) as u8) << 2);
        out.extend_from_slice(&bytes[..width]);
    }
    out.extend_from_slice(lit);
}

/// A match as Snappy spells it: 2-byte-offset copies of up to 64 bytes, the short
/// near ones as 1-byte-offset copies (never offset 0, which S2 reads as a repeat).
fn emit_copy(out: &mut Vec<u8>, offset: usize, mut len: usize) {
    while len >= 68 {
        out.extend_from_slice(&[2 | (63 << 2), offset as u8, (offset >> 8) as u8]);
        len -= 64;
    }
    if len > 64 {
        out.extend_from_slice(&[2 | (59 << 2), offset as u8, (offset >> 8) as u8]);
        len -= 60;
    }
    if len < 12 && offset < 2048 {
        out.push(1 | (((len - 4) as u8) << 2) | (((offset >> 8) as u8) << 5));
        out.push(offset as u8);
    } else {
        out.push(2 | (((len - 1) as u8) << 2));
        out.extend_from_slice(&[offset as u8, (offset >> 8) as u8]);
    }
}

fn load32(src: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]])
}

/// A Snappy-compatible block of `src` (at most `BLOCK` bytes): greedy matching on a
/// hash of four bytes, stepping faster through data that does not compress.
pub fn encode_block(src: &[u8], out: &mut Vec<u8>) {
    put_varint(out, src.len());
    let n = src.len();
    if n < 16 {
        if n > 0 {
            emit_literal(out, src);
        }
        return;
    }
    // A table no larger than the input needs: a small flush does not clear 64 KiB.
    let bits = (usize::BITS - n.leading_zeros()).clamp(8, HASH_BITS);
    let mut table = vec![0u32; 1 << bits];
    let hash = |v: u32| (v.wrapping_mul(0x1e35_a7bd) >> (32 - bits)) as usize;
    let limit = n - 4;
    let (mut s, mut emitted) = (1usize, 0usize);
    while s <= limit {
        let cur = load32(src, s);
        let h = hash(cur);
        let candidate = table[h] as usize;
        table[h] = s as u32;
        if candidate >= s || load32(src, candidate) != cur {
            s += 1 + ((s - emitted) >> 5);
            continue;
        }
        if s > emitted {
            emit_literal(out, &src[emitted..s]);
        }
        let mut len = 4;
        while s + len < n && src[candidate + len] == src[s + len] {
            len += 1;
        }
        emit_copy(out, s - candidate, len);
        s += len;
        emitted = s;
        if s - 1 <= limit {
            table[hash(load32(src, s - 1))] = (s - 1) as u32;
        }
    }
    if emitted < n {
        emit_literal(out, &src[emitted..]);
    }
}

/// The decoded length a block starts with, and where its elements begin.
fn block_len(src: &[u8]) -> Result<(usize, usize), &'static str> {
    let mut n = 0u64;
    for (i, &b) in src.iter().enumerate().take(5) {
        n |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            return if n > u32::MAX as u64 {
                Err("block length overflows")
            } else {
                Ok((n as usize, i + 1))
            };
        }
    }
    Err("block length is not a valid varint")
}

fn le(src: &[u8], at: usize, width: usize) -> Result<usize, &'static str> {
    let bytes = src
        .get(at..at + width)
        .ok_or("block ends inside an element")?;
    Ok(bytes
        .iter()
        .rev()
        .fold(0usize, |n, &b| (n << 8) | b as usize))
}

/// Decode one S2 block (Snappy's plus repeat offsets and 4-byte offsets), refusing
/// one that decodes to more than `max` bytes.
pub fn decode_block(src: &[u8], max: usize) -> Result<Vec<u8>, &'static str> {
    let (want, mut s) = block_len(src)?;
    if want > max {
        return Err("block decodes larger than the maximum block size");
    }
    let mut dst: Vec<u8> = Vec::with_capacity(want);
    let mut offset = 0usize;
    while s < src.len() {
        let tag = src[s];
        let len;
        match tag & 3 {
            0 => {
                let x = (tag >> 2) as usize;
                let (n, width) = if x < 60 {
                    (x, 0)
                } else {
                    (le(src, s + 1, x - 59)?, x - 59)
                };
                s += 1 + width;
                let n = n + 1;
                if n > want - dst.len() || n > src.len() - s {
                    return Err("literal runs past the block");
                }
                dst.extend_from_slice(&src[s..s + n]);
                s += n;
                continue;
            }
            1 => {
                let low = le(src, s + 1, 1)?;
                let near = (((tag & 0xe0) as usize) << 3) | low;
                let code = ((tag >> 2) & 7) as usize;
                s += 2;
                if near == 0 {
                    let (extra, width) = match code {
                        5 => (le(src, s, 1)? + 4, 1),
                        6 => (le(src, s, 2)? + (1 << 8), 2),
                        7 => (le(src, s, 3)? + (1 << 16), 3),
                        _ => (code, 0),
                    };
                    s += width;
                    len = extra + 4;
                } else {
                    offset = near;
                    len = code + 4;
                }
            }
            2 => {
                offset = le(src, s + 1, 2)?;
                len = 1 + (tag >> 2) as usize;
                s += 3;
            }
            _ => {
                offset = le(src, s + 1, 4)?;
                len = 1 + (tag >> 2) as usize;
                s += 5;
            }
        }
        let d = dst.len();
        if offset == 0 || offset > d {
            return Err("copy from before the block's start");
        }
        if len > want - d {
            return Err("copy runs past the block");
        }
        if offset >= len {
            dst.extend_from_within(d - offset..d - offset + len);
        } else {
            for i in 0..len {
                let b = dst[d - offset + i];
                dst.push(b);
            }
        }
    }
    if dst.len() != want {
        return Err("block decodes shorter than it says");
    }
    Ok(dst)
}

fn chunk(out: &mut Vec<u8>, kind: u8, crc: u32, body: &[u8]) {
    let len = body.len() + 4;
    out.extend_from_slice(&[kind, len as u8, (len >> 8) as u8, (len >> 16) as u8]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
}

/// `data` as a stream of its own (identifier first, as the reference's writer starts
/// every flush): compressed chunks where that saves, stored ones otherwise or when
/// `compress` is off (the reference's `s2_uncompressed`).
pub fn encode_stream(data: &[u8], compress: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + data.len() + 8 * (data.len() / BLOCK + 1));
    out.extend_from_slice(MAGIC);
    let mut block = Vec::new();
    for piece in data.chunks(BLOCK) {
        let crc = masked_crc(piece);
        if compress {
            block.clear();
            encode_block(piece, &mut block);
            if block.len() < piece.len() - piece.len() / 8 {
                chunk(&mut out, 0x00, crc, &block);
                continue;
            }
        }
        chunk(&mut out, 0x01, crc, piece);
    }
    out
}

/// Reads one direction of a link: chunks as they arrive in any split, the decoded
/// bytes of each complete one out. An error is final (the link closes).
#[derive(Default)]
pub struct StreamReader {
    buf: Vec<u8>,
    started: bool,
    snappy: bool,
    skip: usize,
}

impl StreamReader {
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let mut data = data;
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
        let mut at = 0;
        let result = loop {
            let rest = &self.buf[at..];
            if rest.len() < 4 {
                break Ok(());
            }
            let kind = rest[0];
            let len = rest[1] as usize | (rest[2] as usize) << 8 | (rest[3] as usize) << 16;
            if !self.started && kind != 0xff {
                break Err(format!(
                    "stream starts with chunk type {kind:#04x}, not its identifier"
                ));
            }
            if kind >= 0x80 && kind != 0xff {
                // padding and skippable chunks: passed over, even before they fully arrive
                let have = (rest.len() - 4).min(len);
                at += 4 + have;
                self.skip = len - have;
                continue;
            }
            if kind != 0xff && kind > 0x01 {
                break Err(format!("unsupported chunk type {kind:#04x}"));
            }
            if kind <= 0x01 && (len < 4 || len > 4 + max_encoded_len(MAX_BLOCK)) {
                break Err(format!("chunk length {len} is out of range"));
            }
            if rest.len() < 4 + len {
                break Ok(());
            }
            let body = &rest[4..4 + len];
            at += 4 + len;
            if kind == 0xff {
                if body == MAGIC_BODY {
                    self.snappy = false;
                } else if body == SNAPPY_BODY {
                    self.snappy = true;
                } else {
                    break Err("bad stream identifier".to_string());
                }
                self.started = true;
                continue;
            }
            let max = if self.snappy {
                SNAPPY_MAX_BLOCK
            } else {
                MAX_BLOCK
            };
            let crc = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
            let start = out.len();
            if kind == 0x00 {
                match decode_block(&body[4..], max) {
                    Ok(decoded) => out.extend_from_slice(&decoded),
                    Err(why) => break Err(format!("corrupt compressed chunk: {why}")),
                }
            } else if body.len() - 4 > max {
                break Err("uncompressed chunk larger than the maximum block size".to_string());
            } else {
                out.extend_from_slice(&body[4..]);
            }
            if masked_crc(&out[start..]) != crc {
                break Err("chunk checksum mismatch".to_string());
            }
        };
        self.buf.drain(..at);
        result
    }
}

fn max_encoded_len(n: usize) -> usize {
    n + n / 6 + 32 + 10
}

/// One flush's bytes as an S2 stream (see `encode_stream`).
#[pyfunction]
pub fn s2_encode_stream<'py>(
    py: Python<'py>,
    data: &[u8],
    compress: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let src = data;
    let out = py.detach(|| encode_stream(src, compress));
    Ok(PyBytes::new(py, &out))
}

#[pyfunction]
pub fn s2_encode_block<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let src = data;
    if src.len() > BLOCK {
        return Err(PyValueError::new_err(format!(
            "a block holds at most {BLOCK} bytes"
        )));
    }
    let mut out = Vec::new();
    encode_block(src, &mut out);
    Ok(PyBytes::new(py, &out))
}

#[pyfunction]
pub fn s2_decode_block<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let decoded = decode_block(data, MAX_BLOCK).map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &decoded))
}

/// The compiled `s2.StreamReader`: `feed` returns what the complete chunks decode to,
/// and raises ValueError (saying what is wrong) on a corrupt stream.
#[pyclass(module = "jetlake_native")]
pub struct S2Reader {
    inner: StreamReader,
    failed: bool,
}

#[pymethods]
impl S2Reader {
    #[new]
    fn new() -> Self {
        S2Reader {
            inner: StreamReader::default(),
            failed: false,
        }
    }

    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        if self.failed {
            return Err(PyValueError::new_err("the stream already failed"));
        }
        let mut out = Vec::new();
        let inner = &mut self.inner;
        // A bug here must cost only this link: a panic becomes the same ValueError.
        let fed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.feed(data, &mut out)))
                .unwrap_or_else(|_| Err("the S2 decoder failed".to_string()));
        if let Err(why) = fed {
            self.failed = true;
            return Err(PyValueError::new_err(why));
        }
        Ok(PyBytes::new(py, &out))
    }
}
