//! Where a message frame between servers ends, for the compiled walks over a route's
//! (`route_split`) and a leafnode link's (`leafnodes`) input.
//!
//! Both walks only cut out the plain messages they build fast and hand every other
//! frame to the Python codec as bytes, so this reads no more of a line than its verb,
//! its tokens and its sizes. Where it is unsure it answers `Err(())` and the walk hands
//! the rest of the read to Python, which says what is wrong.

/// A frame's end, or for a message (`<verb> … [<header size>] <size>` or `HMSG …`) its
/// tokens before the sizes, where its header block ends (None: no headers), where its
/// payload starts and where it stops (the `\r\n` after it not included).
pub(crate) enum MsgFrame<'a> {
    Other(usize),
    Msg {
        fields: Vec<&'a [u8]>,
        hdr_end: Option<usize>,
        start: usize,
        stop: usize,
    },
}

pub(crate) fn parse_size(token: &[u8]) -> Option<usize> {
    if token.is_empty() || token.len() > 10 || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    token.iter().try_fold(0usize, |n, &d| {
        n.checked_mul(10)?.checked_add((d - b'0') as usize)
    })
}

/// The frame at `pos`, reading `verb` (lower case) and `hmsg` followed by one of
/// `verb_ends` as messages (each Python codec has its own rule there): None when it
/// has not fully arrived; Err(()) when Python must see the rest (a size the walk cannot
/// read, a line or payload over its maximum, whitespace Python splits on that the walk
/// does not).
pub(crate) fn msg_frame_at<'a>(
    buf: &'a [u8],
    pos: usize,
    verb: &[u8; 4],
    verb_ends: &[u8],
    max_line: usize,
    max_payload: usize,
) -> Result<Option<MsgFrame<'a>>, ()> {
    let rest = &buf[pos..];
    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
        return if rest.len() > max_line {
            Err(())
        } else {
            Ok(None)
        };
    };
    let next = pos + nl + 1;
    let mut line = &rest[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    if line.len() > max_line {
        return Err(());
    }
    if line.len() < 5 || !verb_ends.contains(&line[4]) {
        return Ok(Some(MsgFrame::Other(next)));
    }
    let seen = [
        line[0] | 0x20,
        line[1] | 0x20,
        line[2] | 0x20,
        line[3] | 0x20,
    ];
    let headers = match &seen {
        v if v == verb => false,
        b"hmsg" => true,
        _ => return Ok(Some(MsgFrame::Other(next))),
    };
    let args = &line[5..];
    if args
        .iter()
        .any(|&b| matches!(b, b'\n' | b'\r' | 0x0b | 0x0c))
    {
        return Err(());
    }
    let mut fields: Vec<&[u8]> = args
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|t| !t.is_empty())
        .collect();
    let total = fields.pop().and_then(parse_size).ok_or(())?;
    if total > max_payload {
        return Err(());
    }
    let hlen = match headers {
        false => None,
        true => {
            let hlen = fields.pop().and_then(parse_size).ok_or(())?;
            if hlen > total {
                return Err(());
            }
            Some(hlen)
        }
    };
    let (start, stop) = (next, next + total);
    if stop + 2 > buf.len() {
        return Ok(None);
    }
    if &buf[stop..stop + 2] != b"\r\n" {
        return Err(());
    }
    Ok(Some(MsgFrame::Msg {
        fields,
        hdr_end: hlen.map(|h| start + h),
        start,
        stop,
    }))
}
