//! The publishes of a stream's Run, Batch or Restored entry read from its log bytes
//! (`log/stream_entries.py` is the reference and the fallback: anything this does not
//! read exactly as it would, it hands back to it). Every follower decodes each
//! replicated message once; in Python that was a fifth of a follower's loop thread.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::ipc::{message, Row};

const PUBLISH: u8 = 1;
const NO_HDR: u32 = 0xFFFF_FFFF;
/// `>BQqqBIIII`: kind, seq, ts, ttl, rollup, then the lengths of subject, header
/// block, data and msg id.
const PUB_HEAD: usize = 1 + 8 + 8 + 8 + 1 + 4 * 4;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The `count` length-prefixed publishes from `at` to the end of `data`, as a tuple of
/// `publish(new_msg(subject, hdr, data, ts), seq, rollups[rollup], ttl, msg_id)`; None
/// when they are not exactly that or a string is not UTF-8 (the reference then says
/// what is wrong, or decodes with surrogate escapes).
#[pyfunction]
pub fn decode_publishes<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    at: usize,
    count: usize,
    new_msg: &Bound<'py, PyAny>,
    publish: &Bound<'py, PyAny>,
    rollups: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(parsed) = parse_all(data.as_bytes(), at, count) else {
        return Ok(None);
    };
    if parsed.iter().any(|p| p.rollup >= rollups.len()) {
        return Ok(None);
    }
    let out = parsed
        .iter()
        .map(|p| one(py, p, new_msg, publish, rollups))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Some(PyTuple::new(py, out)?))
}

/// One publish's fields as its bytes lay them out.
struct Parsed<'a> {
    seq: u64,
    ts: i64,
    ttl: i64,
    rollup: usize,
    subject: &'a str,
    hdr: Option<&'a [u8]>,
    body: &'a [u8],
    msg_id: &'a str,
}

/// The publish in `b`; None when it is not exactly one or a string is not UTF-8.
fn parse(b: &[u8]) -> Option<Parsed<'_>> {
    if b.len() < PUB_HEAD || b[0] != PUBLISH {
        return None;
    }
    let (seq, ts, ttl) = (u64_at(b, 1)?, u64_at(b, 9)?, u64_at(b, 17)?);
    let (n_subject, n_hdr) = (u32_at(b, 26)?, u32_at(b, 30)?);
    let (n_data, n_id) = (u32_at(b, 34)? as usize, u32_at(b, 38)? as usize);
    let has_hdr = n_hdr != NO_HDR;
    let n_hdr = if has_hdr { n_hdr as usize } else { 0 };
    let n_subject = n_subject as usize;
    if PUB_HEAD + n_subject + n_hdr + n_data + n_id != b.len() {
        return None;
    }
    let mut at = PUB_HEAD;
    let mut next = |n: usize| {
        let part = &b[at..at + n];
        at += n;
        part
    };
    let (subject, hdr, body, msg_id) = (next(n_subject), next(n_hdr), next(n_data), next(n_id));
    Some(Parsed {
        seq,
        ts: ts as i64,
        ttl: ttl as i64,
        rollup: b[25] as usize,
        subject: std::str::from_utf8(subject).ok()?,
        hdr: has_hdr.then_some(hdr),
        body,
        msg_id: std::str::from_utf8(msg_id).ok()?,
    })
}

/// The `count` length-prefixed publishes from `at` to the end of `buf`, each parsed;
/// None as for `decode_publishes`.
fn parse_all(buf: &[u8], at: usize, count: usize) -> Option<Vec<Parsed<'_>>> {
    let mut at = at;
    let mut out = Vec::with_capacity(count.min(buf.len() / PUB_HEAD + 1));
    for _ in 0..count {
        let size = u32_at(buf, at)? as usize;
        at += 4;
        out.push(parse(buf.get(at..at + size)?)?);
        at += size;
    }
    (at == buf.len()).then_some(out)
}

fn one<'py>(
    py: Python<'py>,
    p: &Parsed<'_>,
    new_msg: &Bound<'py, PyAny>,
    publish: &Bound<'py, PyAny>,
    rollups: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let hdr = match p.hdr {
        Some(hdr) => PyBytes::new(py, hdr).into_any(),
        None => py.None().into_bound(py),
    };
    let msg = new_msg.call1((
        PyString::new(py, p.subject),
        hdr,
        PyBytes::new(py, p.body),
        p.ts,
    ))?;
    publish.call1((
        msg,
        p.seq,
        rollups.get_item(p.rollup)?,
        p.ttl,
        PyString::new(py, p.msg_id),
    ))
}

/// A plain Run's messages as a segment batch, read straight from the entry's bytes: the
/// IPC message (`ipc::message`), the first seq, each message's subject (one `str` for a
/// subject repeated back to back), the bytes each counts for (`msg_size` with the store's
/// `overhead`: base, with headers) as native u64s and their sum, and the least, greatest
/// and last timestamps. None when the publishes are not all plain (a msg id, a rollup, a
/// TTL, seqs that do not follow one another) or not exactly what `decode_publishes` reads:
/// those are applied from their `Publish`es.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn run_rows<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    at: usize,
    count: usize,
    meta: &[u8],
    layout: (usize, usize, usize, usize),
    overhead: (u64, u64),
) -> PyResult<
    Option<(
        Bound<'py, PyBytes>,
        u64,
        Bound<'py, PyList>,
        Bound<'py, PyBytes>,
        u64,
        i64,
        i64,
        i64,
    )>,
> {
    let Some(parsed) = parse_all(data.as_bytes(), at, count) else {
        return Ok(None);
    };
    let Some(first) = parsed.first() else {
        return Ok(None);
    };
    let first_seq = first.seq;
    let plain = parsed.iter().enumerate().all(|(i, p)| {
        p.rollup == 0
            && p.ttl == 0
            && p.msg_id.is_empty()
            && Some(p.seq) == first_seq.checked_add(i as u64)
    });
    if !plain {
        return Ok(None);
    }
    let rows: Vec<Row<'_>> = parsed
        .iter()
        .map(|p| (p.subject.as_bytes(), p.hdr, p.body, p.ts))
        .collect();
    let payload = message(py, meta, layout, first_seq, &rows)?;
    let subjects = PyList::empty(py);
    let mut sizes = Vec::with_capacity(8 * parsed.len());
    let mut total: u64 = 0;
    let mut last: Option<(&str, Bound<'py, PyString>)> = None;
    for p in &parsed {
        let name = match &last {
            Some((text, name)) if *text == p.subject => name.clone(),
            _ => PyString::new(py, p.subject),
        };
        subjects.append(&name)?;
        last = Some((p.subject, name));
        let mut size = overhead.0 + (p.subject.len() + p.body.len()) as u64;
        if let Some(hdr) = p.hdr.filter(|h| !h.is_empty()) {
            size += overhead.1 + hdr.len() as u64;
        }
        total += size;
        sizes.extend_from_slice(&size.to_ne_bytes());
    }
    let min_ts = parsed.iter().map(|p| p.ts).min().unwrap_or(0);
    let max_ts = parsed.iter().map(|p| p.ts).max().unwrap_or(0);
    let last_ts = parsed.last().map_or(0, |p| p.ts);
    Ok(Some((
        payload,
        first_seq,
        subjects,
        PyBytes::new(py, &sizes),
        total,
        min_ts,
        max_ts,
        last_ts,
    )))
}

/// One `Publish`'s log bytes, length-prefixed, appended to `out`; None when a field is not
/// of its plain type, a string holds surrogate escapes, a length passes a u32 or the
/// publish is a fast batch's (the reference then encodes it, or says what is wrong).
fn put_publish(entry: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<Option<()>> {
    let Ok(entry) = entry.cast::<PyTuple>() else {
        return Ok(None);
    };
    if entry.len() != 6 || !entry.get_item(5)?.is_none() {
        return Ok(None);
    }
    let msg = entry.get_item(0)?;
    let Ok(msg) = msg.cast::<PyTuple>() else {
        return Ok(None);
    };
    if msg.len() != 4 {
        return Ok(None);
    }
    let (subject, hdr, data) = (msg.get_item(0)?, msg.get_item(1)?, msg.get_item(2)?);
    let (rollup, msg_id) = (entry.get_item(2)?, entry.get_item(4)?);
    let (Ok(subject), Ok(data), Ok(rollup), Ok(msg_id)) = (
        subject.cast::<PyString>(),
        data.cast::<PyBytes>(),
        rollup.cast::<PyString>(),
        msg_id.cast::<PyString>(),
    ) else {
        return Ok(None);
    };
    let hdr = if hdr.is_none() {
        None
    } else if let Ok(hdr) = hdr.cast::<PyBytes>() {
        Some(hdr.as_bytes())
    } else {
        return Ok(None);
    };
    let (Ok(subject), Ok(rollup), Ok(msg_id)) =
        (subject.to_str(), rollup.to_str(), msg_id.to_str())
    else {
        return Ok(None);
    };
    let Some(rollup) = ["", "sub", "all"].iter().position(|r| *r == rollup) else {
        return Ok(None);
    };
    let (Ok(seq), Ok(ts), Ok(ttl)) = (
        entry.get_item(1)?.extract::<u64>(),
        msg.get_item(3)?.extract::<i64>(),
        entry.get_item(3)?.extract::<i64>(),
    ) else {
        return Ok(None);
    };
    let data = data.as_bytes();
    let n_hdr = hdr.map_or(Some(NO_HDR), |h| {
        u32::try_from(h.len()).ok().filter(|n| *n != NO_HDR)
    });
    let lengths = (
        u32::try_from(subject.len()).ok(),
        n_hdr,
        u32::try_from(data.len()).ok(),
        u32::try_from(msg_id.len()).ok(),
    );
    let (Some(n_subject), Some(n_hdr), Some(n_data), Some(n_id)) = lengths else {
        return Ok(None);
    };
    let hdr = hdr.unwrap_or(&[]);
    let size = PUB_HEAD + subject.len() + hdr.len() + data.len() + msg_id.len();
    let Ok(size) = u32::try_from(size) else {
        return Ok(None);
    };
    out.extend_from_slice(&size.to_be_bytes());
    out.push(PUBLISH);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.push(rollup as u8);
    for n in [n_subject, n_hdr, n_data, n_id] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    for part in [subject.as_bytes(), hdr, data, msg_id.as_bytes()] {
        out.extend_from_slice(part);
    }
    Ok(Some(()))
}

/// `head` then each of `msgs` (`Publish` tuples) length-prefixed: a Run, Batch or Restored
/// entry as `_encode_publishes` writes it, which the leader does for every message it
/// proposes; None for the reference to encode (see `put_publish`).
#[pyfunction]
pub fn encode_publishes<'py>(
    py: Python<'py>,
    head: &[u8],
    msgs: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut out = Vec::with_capacity(head.len() + msgs.len() * (PUB_HEAD + 64));
    out.extend_from_slice(head);
    for entry in msgs.iter() {
        if put_publish(&entry, &mut out)?.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(PyBytes::new(py, &out)))
}
