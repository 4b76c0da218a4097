//! A Raft message read from its frame (`consensus/codec.py` is the reference and the
//! fallback: anything this does not read exactly as it would, a snapshot or a malformed
//! frame, it hands back to it, which names what is wrong). One publish at a time costs
//! each leader two answers decoded and each follower an APPEND, and in Python a decode
//! was a reader object, a dozen calls and a `Message` built by keywords.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString, PyTuple};

const VERSION: u8 = 1;
const REJECT: u8 = 1;
const HELD: u8 = 4;
/// `>BBBQQQQQ`: version, type, flags, term, log_term, index, commit, reject_hint.
const HEAD: usize = 3 + 5 * 8;
/// `>QQBI`: an entry's term, index, kind and data length.
const ENTRY_HEAD: usize = 8 + 8 + 1 + 4;

/// Reads `data` front to back; every read past the end is None.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, size: usize) -> Option<&'a [u8]> {
        let part = self.data.get(self.at..self.at.checked_add(size)?)?;
        self.at += size;
        Some(part)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<usize> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?) as usize)
    }

    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn name(&mut self) -> Option<&'a str> {
        let size = self.u16()?;
        std::str::from_utf8(self.take(size)?).ok()
    }

    fn blob(&mut self) -> Option<&'a [u8]> {
        let size = self.u32()?;
        self.take(size)
    }
}

/// One entry's fields as the frame lays them out.
struct RawEntry<'a> {
    term: u64,
    index: u64,
    kind: usize,
    data: &'a [u8],
}

/// The `Message` in `frame[at..end]` (a payload after its length prefix), built as
/// `message(type, src, dst, term, log_term, index, entries, commit, reject, reject_hint,
/// context, None, held)` with each entry `entry(term, index, kind, data)`, the enums'
/// members taken from `types` and `kinds` by value; None for anything else (a snapshot,
/// a version, flag, type or kind it does not know, a truncated frame or stray bytes, a
/// name that is not UTF-8).
#[pyfunction]
#[allow(clippy::too_many_arguments)] // what to build with, passed once per call from Python
pub fn decode_raft<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyBytes>,
    at: usize,
    end: usize,
    message: &Bound<'py, PyAny>,
    entry: &Bound<'py, PyAny>,
    types: &Bound<'py, PyTuple>,
    kinds: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(data) = frame.as_bytes().get(..end) else {
        return Ok(None);
    };
    let mut cur = Cursor { data, at };
    let Some(parsed) = parse(&mut cur) else {
        return Ok(None);
    };
    let (head, src, dst, context, raw) = parsed;
    let [version, kind, flags] = [head.0, head.1, head.2];
    if version != VERSION
        || flags & !(REJECT | HELD) != 0
        || kind as usize >= types.len()
        || raw.iter().any(|e| e.kind >= kinds.len())
    {
        return Ok(None); // a snapshot among the flags goes to the reference too
    }
    let mut entries = Vec::with_capacity(raw.len());
    for e in &raw {
        entries.push(entry.call1((
            e.term,
            e.index,
            kinds.get_item(e.kind)?,
            PyBytes::new(py, e.data),
        ))?);
    }
    let [term, log_term, index, commit, hint] = head.3;
    let flag = |bit: u8| PyBool::new(py, flags & bit != 0).to_owned().into_any();
    // Positional, in the dataclass's field order: 13 of them, past a Rust tuple's 12.
    let args = PyTuple::new(
        py,
        [
            types.get_item(kind as usize)?,
            PyString::new(py, src).into_any(),
            PyString::new(py, dst).into_any(),
            term.into_pyobject(py)?.into_any(),
            log_term.into_pyobject(py)?.into_any(),
            index.into_pyobject(py)?.into_any(),
            PyTuple::new(py, entries)?.into_any(),
            commit.into_pyobject(py)?.into_any(),
            flag(REJECT),
            hint.into_pyobject(py)?.into_any(),
            PyBytes::new(py, context).into_any(),
            py.None().into_bound(py),
            flag(HELD),
        ],
    )?;
    let msg = message.call1(args)?;
    Ok(Some(msg))
}

type Head = (u8, u8, u8, [u64; 5]);

/// The frame's fields, None where it is short, has stray bytes or a name is not UTF-8.
#[allow(clippy::type_complexity)]
fn parse<'a>(
    cur: &mut Cursor<'a>,
) -> Option<(Head, &'a str, &'a str, &'a [u8], Vec<RawEntry<'a>>)> {
    if cur.data.len() < cur.at.checked_add(HEAD)? {
        return None;
    }
    let (version, kind, flags) = (cur.u8()?, cur.u8()?, cur.u8()?);
    let numbers = [cur.u64()?, cur.u64()?, cur.u64()?, cur.u64()?, cur.u64()?];
    let (src, dst, context) = (cur.name()?, cur.name()?, cur.blob()?);
    let count = cur.u32()?;
    if count.checked_mul(ENTRY_HEAD)? > cur.data.len() - cur.at {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let (term, index, kind) = (cur.u64()?, cur.u64()?, cur.u8()? as usize);
        let data = cur.blob()?;
        entries.push(RawEntry {
            term,
            index,
            kind,
            data,
        });
    }
    if cur.at != cur.data.len() {
        return None; // stray bytes, or a snapshot: the reference reads it
    }
    Some(((version, kind, flags, numbers), src, dst, context, entries))
}
