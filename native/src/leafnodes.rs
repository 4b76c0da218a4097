//! The compiled part of a leafnode link's intake (`ingest/parser/leafnodes.py` is the
//! reference codec and stays the one that builds operations).
//!
//! `split_leaf` walks a read's frames only far enough to know where each ends, and
//! cuts out runs of consecutive plain `LMSG <subject> <size>` frames (no reply, no queue
//! group, no header block) on one subject: those are a publisher's stream across the
//! link, and the connection hands each run to `frame_run` whole. Everything else comes
//! back as byte segments of whole frames for the Python codec, so the rare operations
//! and every error keep one implementation; where the walk is unsure (a malformed size,
//! a long line) it hands the rest to Python, which says what is wrong.

use crate::frames::{msg_frame_at, MsgFrame};
use crate::routes::{frame_into, send_notices, Route, Routes};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// A frame's end, and the run subject when it is a plain LMSG (payload range too).
enum Frame<'a> {
    Other(usize),
    Plain(&'a [u8], usize, usize, usize),
}

/// The frame at `pos` as the run walk sees it: a plain LMSG or any other frame.
fn frame_at(
    buf: &[u8],
    pos: usize,
    max_line: usize,
    max_payload: usize,
) -> Result<Option<Frame<'_>>, ()> {
    Ok(
        msg_frame_at(buf, pos, b"lmsg", b" \t", max_line, max_payload)?.map(|frame| match frame {
            MsgFrame::Msg {
                fields,
                hdr_end: None,
                start,
                stop,
            } if fields.len() == 1 => Frame::Plain(fields[0], start, stop, stop + 2),
            MsgFrame::Msg { stop, .. } => Frame::Other(stop + 2),
            MsgFrame::Other(next) => Frame::Other(next),
        }),
    )
}

/// Split `buf` into items in order: `bytes` (whole frames for the Python codec) and
/// `(subject, [payload, …])` runs; and where the last whole frame ends (what follows
/// waits for the next read).
#[pyfunction]
pub fn split_leaf<'py>(
    py: Python<'py>,
    buf: &[u8],
    max_line: usize,
    max_payload: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let items = PyList::empty(py);
    let (mut pos, mut raw_from) = (0usize, 0usize);
    let mut run: Option<(&[u8], Bound<'py, PyList>)> = None;
    let flush_raw = |items: &Bound<'py, PyList>, from: usize, to: usize| -> PyResult<()> {
        if to > from {
            items.append(PyBytes::new(py, &buf[from..to]))?;
        }
        Ok(())
    };
    let end_run = |items: &Bound<'py, PyList>, run: &mut Option<(&[u8], Bound<'py, PyList>)>| {
        if let Some((subject, payloads)) = run.take() {
            let item = PyTuple::new(
                py,
                [PyBytes::new(py, subject).into_any(), payloads.into_any()],
            )?;
            items.append(item)?;
        }
        PyResult::Ok(())
    };
    while pos < buf.len() {
        match frame_at(buf, pos, max_line, max_payload) {
            Ok(None) => break,
            Err(()) => {
                end_run(&items, &mut run)?;
                flush_raw(&items, raw_from, buf.len())?;
                return Ok((items, buf.len()));
            }
            Ok(Some(Frame::Plain(subject, start, stop, next))) => {
                flush_raw(&items, raw_from, pos)?;
                if run.as_ref().is_some_and(|(s, _)| *s != subject) {
                    end_run(&items, &mut run)?;
                }
                let payload = PyBytes::new(py, &buf[start..stop]);
                match &run {
                    Some((_, payloads)) => payloads.append(payload)?,
                    None => run = Some((subject, PyList::new(py, [payload])?)),
                }
                pos = next;
                raw_from = pos;
            }
            Ok(Some(Frame::Other(next))) => {
                end_run(&items, &mut run)?;
                pos = next;
            }
        }
    }
    end_run(&items, &mut run)?;
    flush_raw(&items, raw_from, pos)?;
    Ok((items, pos))
}

/// Frame every payload of a run on `subject` into the client subscriptions the table
/// learnt for it: their count, or None where Python must route the run.
#[pyfunction]
pub fn frame_run(
    py: Python<'_>,
    routes: &Bound<'_, Routes>,
    subject: &[u8],
    payloads: &Bound<'_, PyList>,
) -> PyResult<Option<usize>> {
    let mut table = routes.borrow_mut();
    let Some(Route::Fast(targets)) = table.get_mut(subject) else {
        return Ok(None);
    };
    let mut notices = Vec::new();
    for payload in payloads.iter() {
        let payload = payload.cast::<PyBytes>()?;
        frame_into(
            py,
            targets,
            subject,
            b"",
            None,
            payload.as_bytes(),
            &mut notices,
        );
    }
    let n = targets.len();
    table.unsettled |= n > 0;
    drop(table);
    send_notices(py, notices)?;
    Ok(Some(n))
}
