//! The compiled walk over a route's input (`ingest/parser/routes.py` is the reference
//! codec and stays the one that reads every other frame and says what is wrong).
//!
//! Between servers nearly every frame is a plain `RMSG <account> <subject> [<reply>]
//! <size>`: a client's publish forwarded to a stream leader, its PubAck coming back,
//! a Raft message; or the same as an HMSG (a consumer's delivery to a client on the
//! peer). `split_route` builds those messages here, each by the codec's own `RMsg`
//! class, and hands back every other frame (queue groups, interest, control) as bytes
//! for the Python codec, in order; where the walk is unsure (a size it cannot read, a long line, whitespace
//! other than spaces and tabs) it hands the rest to Python.

use crate::frames::{msg_frame_at, MsgFrame};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

/// A frame's end, and for a message without queue groups its account, subject, reply,
/// where its payload starts, where its header block ends (None: no headers) and where
/// it stops.
enum Frame<'a> {
    Other(usize),
    Plain([&'a [u8]; 3], usize, Option<usize>, usize),
}

/// The frame at `pos` as the route walk sees it: an RMSG or HMSG without queue groups,
/// or any other frame.
fn frame_at(
    buf: &[u8],
    pos: usize,
    max_line: usize,
    max_payload: usize,
) -> Result<Option<Frame<'_>>, ()> {
    Ok(
        msg_frame_at(buf, pos, b"rmsg", b" ", max_line, max_payload)?.map(|frame| match frame {
            MsgFrame::Msg {
                fields,
                hdr_end,
                start,
                stop,
            } => match fields[..] {
                [account, subject] => Frame::Plain([account, subject, b""], start, hdr_end, stop),
                [account, subject, reply] if reply != b"+" && reply != b"|" => {
                    Frame::Plain([account, subject, reply], start, hdr_end, stop)
                }
                _ => Frame::Other(stop + 2),
            },
            MsgFrame::Other(next) => Frame::Other(next),
        }),
    )
}

/// Split `buf` into items in order: `bytes` (whole frames for the Python codec) and
/// messages without queue groups made by `make(account, subject, reply, (), headers or
/// None, payload)`; and where
/// the last whole frame ends (what follows waits for the next read).
#[pyfunction]
pub fn split_route<'py>(
    py: Python<'py>,
    buf: &[u8],
    max_line: usize,
    max_payload: usize,
    make: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let items = PyList::empty(py);
    let (mut pos, mut raw_from) = (0usize, 0usize);
    let no_queues = PyTuple::empty(py);
    let mut accounts: Vec<(&[u8], Bound<'py, PyString>)> = Vec::new();
    let flush_raw = |items: &Bound<'py, PyList>, from: usize, to: usize| -> PyResult<()> {
        if to > from {
            items.append(PyBytes::new(py, &buf[from..to]))?;
        }
        Ok(())
    };
    while pos < buf.len() {
        match frame_at(buf, pos, max_line, max_payload) {
            Ok(None) => break,
            Err(()) => {
                flush_raw(&items, raw_from, buf.len())?;
                return Ok((items, buf.len()));
            }
            Ok(Some(Frame::Other(next))) => pos = next,
            Ok(Some(Frame::Plain([account, subject, reply], start, hdr_end, stop))) => {
                flush_raw(&items, raw_from, pos)?;
                let name = match accounts.iter().find(|(a, _)| *a == account) {
                    Some((_, name)) => name.clone(),
                    None => {
                        let name = PyBytes::new(py, account)
                            .call_method1("decode", ("utf-8", "surrogateescape"))?
                            .cast_into::<PyString>()?;
                        accounts.push((account, name.clone()));
                        name
                    }
                };
                let (hdr, body) = match hdr_end {
                    Some(end) => (PyBytes::new(py, &buf[start..end]).into_any(), end),
                    None => (py.None().into_bound(py), start),
                };
                let msg = make.call1((
                    name,
                    PyBytes::new(py, subject),
                    PyBytes::new(py, reply),
                    &no_queues,
                    hdr,
                    PyBytes::new(py, &buf[body..stop]),
                ))?;
                items.append(msg)?;
                pos = stop + 2;
                raw_from = pos;
            }
        }
    }
    flush_raw(&items, raw_from, pos)?;
    Ok((items, pos))
}
