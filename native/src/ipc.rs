//! A batch of new messages as the Arrow IPC message a segment stores.
//!
//! `_encode` in `log/segments/ipc.py` is the reference: the same template-patched
//! metadata, the same body, byte for byte. A group commit of a few rows spends most
//! of its Python time in that function's list and array building; here it is one
//! pass over the rows and one copy into the result.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

/// One `NewMsg`'s fields: subject, header block (None: missing), data, ts.
type Fields<'py> = (
    Bound<'py, PyString>,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    i64,
);
/// The same, borrowed as bytes.
pub type Row<'a> = (&'a [u8], Option<&'a [u8]>, &'a [u8], i64);

/// The body under construction and the (offset, length) of each of its buffers.
struct Body {
    bytes: Vec<u8>,
    spans: Vec<i64>,
}

impl Body {
    /// Close the buffer that started at `start`: record its span, pad to 8 bytes.
    fn close(&mut self, start: usize) {
        self.spans.push(start as i64);
        self.spans.push((self.bytes.len() - start) as i64);
        let padded = self.bytes.len().next_multiple_of(8);
        self.bytes.resize(padded, 0);
    }

    /// A buffer that is absent (a validity bitmap where nothing is missing).
    fn none(&mut self) {
        self.spans.push(self.bytes.len() as i64);
        self.spans.push(0);
    }

    /// A variable-width column: int32 offsets, then the values one after another.
    fn values<'a>(&mut self, values: impl Iterator<Item = &'a [u8]> + Clone) -> PyResult<()> {
        let start = self.bytes.len();
        let mut end: i64 = 0;
        self.bytes.extend_from_slice(&0i32.to_le_bytes());
        for value in values.clone() {
            end += value.len() as i64;
            let offset = i32::try_from(end)
                .map_err(|_| PyOverflowError::new_err("column larger than an int32 offset"))?;
            self.bytes.extend_from_slice(&offset.to_le_bytes());
        }
        self.close(start);
        let start = self.bytes.len();
        for value in values {
            self.bytes.extend_from_slice(value);
        }
        self.close(start);
        Ok(())
    }
}

fn put(meta: &mut [u8], at: usize, values: &[i64]) -> PyResult<()> {
    let end = at + 8 * values.len();
    let slot = meta
        .get_mut(at..end)
        .ok_or_else(|| PyValueError::new_err("metadata template shorter than its layout"))?;
    for (chunk, value) in slot.chunks_exact_mut(8).zip(values) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}

/// Read one `NewMsg`; None when a field is not of the plain type (`bytes`, `str`),
/// which sends the whole batch to the reference encoder.
fn fields<'py>(msg: &Bound<'py, PyAny>) -> PyResult<Option<Fields<'py>>> {
    let Ok(msg) = msg.cast::<PyTuple>() else {
        return Ok(None);
    };
    if msg.len() != 4 {
        return Ok(None);
    }
    let (Ok(subject), Ok(data)) = (
        msg.get_item(0)?.cast_into::<PyString>(),
        msg.get_item(2)?.cast_into::<PyBytes>(),
    ) else {
        return Ok(None);
    };
    let hdr = msg.get_item(1)?;
    let hdr = if hdr.is_none() {
        None
    } else if let Ok(hdr) = hdr.cast_into::<PyBytes>() {
        Some(hdr)
    } else {
        return Ok(None);
    };
    Ok(Some((
        subject,
        hdr,
        data,
        msg.get_item(3)?.extract::<i64>()?,
    )))
}

/// The IPC message of `msgs` (NewMsg tuples) numbered from `first_seq`: `meta` is the
/// metadata template and `at` where its body length, row count, 13 buffer spans and
/// 5 field nodes sit. None when a field is not plain `str`/`bytes`.
#[pyfunction]
pub fn encode_batch<'py>(
    py: Python<'py>,
    meta: &[u8],
    at: (usize, usize, usize, usize),
    first_seq: u64,
    msgs: Vec<Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut held: Vec<Fields<'py>> = Vec::with_capacity(msgs.len());
    for msg in &msgs {
        match fields(msg)? {
            Some(f) => held.push(f),
            None => return Ok(None),
        }
    }
    let mut rows: Vec<Row<'_>> = Vec::with_capacity(held.len());
    for (subject, hdr, data, ts) in &held {
        let hdr = hdr.as_ref().map(|h| h.as_bytes());
        rows.push((subject.to_str()?.as_bytes(), hdr, data.as_bytes(), *ts));
    }
    message(py, meta, at, first_seq, &rows).map(Some)
}

/// The IPC message of `rows` numbered from `first_seq` (see `encode_batch`); also what a
/// follower writes for a Run's rows read straight from its log bytes (`entries::run_rows`).
pub fn message<'py>(
    py: Python<'py>,
    meta: &[u8],
    at: (usize, usize, usize, usize),
    first_seq: u64,
    rows: &[Row<'_>],
) -> PyResult<Bound<'py, PyBytes>> {
    let n = rows.len();
    first_seq
        .checked_add((n as u64).saturating_sub(1))
        .ok_or_else(|| PyOverflowError::new_err("sequence past 2**64"))?;
    let payload: usize = rows
        .iter()
        .map(|r| r.0.len() + r.1.map_or(0, <[u8]>::len) + r.2.len())
        .sum();
    let mut body = Body {
        bytes: Vec::with_capacity(payload + 48 * n + 128),
        spans: vec![0, 0], // seq has no validity bitmap, nor do ts, subject and data
    };
    let start = body.bytes.len();
    for i in 0..n as u64 {
        body.bytes.extend_from_slice(&(first_seq + i).to_le_bytes());
    }
    body.close(start);
    body.none();
    let start = body.bytes.len();
    for r in rows {
        body.bytes.extend_from_slice(&r.3.to_le_bytes());
    }
    body.close(start);
    body.none();
    body.values(rows.iter().map(|r| r.0))?;
    let missing = rows.iter().filter(|r| r.1.is_none()).count();
    if missing > 0 {
        let start = body.bytes.len();
        body.bytes.resize(start + n.div_ceil(8), 0);
        for (i, r) in rows.iter().enumerate() {
            if r.1.is_some() {
                body.bytes[start + i / 8] |= 1 << (i % 8);
            }
        }
        body.close(start);
    } else {
        body.none();
    }
    body.values(rows.iter().map(|r| r.1.unwrap_or(&[])))?;
    body.none();
    body.values(rows.iter().map(|r| r.2))?;
    let mut head = meta.to_vec();
    let (n, missing) = (n as i64, missing as i64);
    put(&mut head, at.0, &[body.bytes.len() as i64])?;
    put(&mut head, at.1, &[n])?;
    put(&mut head, at.2, &body.spans)?;
    put(&mut head, at.3, &[n, 0, n, 0, n, 0, n, missing, n, 0])?;
    let out = PyBytes::new_with(py, head.len() + body.bytes.len(), |out| {
        out[..head.len()].copy_from_slice(&head);
        out[head.len()..].copy_from_slice(&body.bytes);
        Ok(())
    })?;
    Ok(out)
}
