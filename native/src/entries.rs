//! The publishes of a stream's Run, Batch or Restored entry read from its log bytes
//! (`log/stream_entries.py` is the reference and the fallback: anything this does not
//! read exactly as it would, it hands back to it). Every follower decodes each
//! replicated message once; in Python that was a fifth of a follower's loop thread.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

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
    let buf = data.as_bytes();
    let mut at = at;
    let mut out = Vec::with_capacity(count.min(buf.len() / PUB_HEAD + 1));
    for _ in 0..count {
        let Some(size) = u32_at(buf, at) else {
            return Ok(None);
        };
        at += 4;
        let end = at + size as usize;
        if end > buf.len() {
            return Ok(None);
        }
        match one(py, &buf[at..end], new_msg, publish, rollups)? {
            Some(entry) => out.push(entry),
            None => return Ok(None),
        }
        at = end;
    }
    if at != buf.len() {
        return Ok(None);
    }
    Ok(Some(PyTuple::new(py, out)?))
}

fn one<'py>(
    py: Python<'py>,
    b: &[u8],
    new_msg: &Bound<'py, PyAny>,
    publish: &Bound<'py, PyAny>,
    rollups: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if b.len() < PUB_HEAD || b[0] != PUBLISH {
        return Ok(None);
    }
    let (Some(seq), Some(ts), Some(ttl)) = (u64_at(b, 1), u64_at(b, 9), u64_at(b, 17)) else {
        return Ok(None);
    };
    let rollup = b[25] as usize;
    let lengths = (u32_at(b, 26), u32_at(b, 30), u32_at(b, 34), u32_at(b, 38));
    let (Some(n_subject), Some(n_hdr), Some(n_data), Some(n_id)) = lengths else {
        return Ok(None);
    };
    let has_hdr = n_hdr != NO_HDR;
    let n_hdr = if has_hdr { n_hdr as usize } else { 0 };
    let (n_subject, n_data, n_id) = (n_subject as usize, n_data as usize, n_id as usize);
    if PUB_HEAD + n_subject + n_hdr + n_data + n_id != b.len() || rollup >= rollups.len() {
        return Ok(None);
    }
    let mut at = PUB_HEAD;
    let mut next = |n: usize| {
        let part = &b[at..at + n];
        at += n;
        part
    };
    let (subject, hdr, body, msg_id) = (next(n_subject), next(n_hdr), next(n_data), next(n_id));
    let (Ok(subject), Ok(msg_id)) = (std::str::from_utf8(subject), std::str::from_utf8(msg_id))
    else {
        return Ok(None);
    };
    let hdr = if has_hdr {
        PyBytes::new(py, hdr).into_any()
    } else {
        py.None().into_bound(py)
    };
    let msg = new_msg.call1((
        PyString::new(py, subject),
        hdr,
        PyBytes::new(py, body),
        ts as i64,
    ))?;
    let entry = publish.call1((
        msg,
        seq,
        rollups.get_item(rollup)?,
        ttl as i64,
        PyString::new(py, msg_id),
    ))?;
    Ok(Some(entry))
}
