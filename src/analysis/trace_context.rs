//! W3C trace context, as MongoDB drivers send it: the trace id that lets a
//! finding point at the traces of the requests behind it.
//!
//! A driver with OpenTelemetry on attaches the context of the span a
//! command runs in to the OP_MSG that carries it, as a payload type 3
//! section: `{otel: {traceparent: "00-<trace id>-<parent id>-<flags>"}}`.
//! The trace id is what the analysis groups and reports by; the parent id
//! (the driver's span the command ran in) is kept only beside a finding,
//! for its OTLP log record ([`TraceContext`]); the flags say nothing the
//! analysis needs. A value that is not a well-formed `traceparent` gives
//! no id rather than a wrong one. The wire layer finds
//! the section; the command model hands its bytes here
//! (`command::Command::trace_id`).

use bson::RawDocument;

/// A W3C trace id (the second field of a `traceparent`), as drivers put it
/// in an OP_MSG's payload type 3: `{otel: {traceparent: "00-<trace id>-
/// <parent id>-<flags>"}}`. Shown as the 32 lowercase hex digits tracing
/// tools search by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

impl TraceId {
    /// The trace id of a payload type 3 document (`{otel: {traceparent:
    /// …}}`), if it has one and it is well formed.
    pub fn from_context_document(document: &[u8]) -> Option<TraceId> {
        TraceContext::from_context_document(document).map(|c| c.trace)
    }

    /// The trace id of a `comment` that carries a W3C trace context as
    /// sqlcommenter-style propagation writes it (`traceparent='00-…'`,
    /// among other `key='value'` pairs), or is one.
    pub fn from_comment(comment: &str) -> Option<TraceId> {
        if let Some(id) = TraceId::from_traceparent(comment.trim()) {
            return Some(id);
        }
        let at = comment.find("traceparent")?;
        let rest = comment[at + "traceparent".len()..].trim_start();
        let rest = rest.strip_prefix('=')?.trim_start();
        let rest = rest.trim_start_matches(['\'', '"']);
        let end = rest.find(['\'', '"', ',', ' ', '*']).unwrap_or(rest.len());
        TraceId::from_traceparent(&rest[..end])
    }

    /// Reads a `traceparent` value: a version other than `ff`, a trace id
    /// and a parent id that are not all zeros, lowercase hex throughout
    /// (W3C Trace Context §3.2). Fields after the flags (later versions)
    /// are allowed.
    pub fn from_traceparent(value: &str) -> Option<TraceId> {
        TraceContext::from_traceparent(value).map(|c| c.trace)
    }
}

/// A W3C span id: a `traceparent`'s parent id, the span of the driver's
/// command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanId([u8; 8]);

impl SpanId {
    /// The id's 8 bytes, as OpenTelemetry takes them.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }
}

/// The trace and span ids of a `traceparent`: what a finding raised by the
/// command keeps, so that its log record opens beside the command's span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace: TraceId,
    pub span: SpanId,
}

impl TraceContext {
    /// The context of a payload type 3 document (`{otel: {traceparent:
    /// …}}`), if it has one and it is well formed.
    pub fn from_context_document(document: &[u8]) -> Option<TraceContext> {
        let context = RawDocument::from_bytes(document).ok()?;
        let otel = context.get_document("otel").ok()?;
        TraceContext::from_traceparent(otel.get_str("traceparent").ok()?)
    }

    /// As [`TraceId::from_traceparent`], with the parent id.
    pub fn from_traceparent(value: &str) -> Option<TraceContext> {
        let mut fields = value.split('-');
        let (version, trace, parent, flags) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(version, 2) || version == "ff" || !hex(parent, 16) || !hex(flags, 2) {
            return None;
        }
        if version == "00" && fields.next().is_some() {
            return None;
        }
        if !hex(trace, 32) {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&trace[2 * i..2 * i + 2], 16).ok()?;
        }
        let mut span = [0u8; 8];
        for (i, byte) in span.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&parent[2 * i..2 * i + 2], 16).ok()?;
        }
        (id != [0; 16] && span != [0; 8]).then_some(TraceContext {
            trace: TraceId(id),
            span: SpanId(span),
        })
    }
}

impl TraceId {
    /// The id's 16 bytes, as OpenTelemetry takes them.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// A `traceparent` gives its trace id, shown as tracing tools search
    /// by; a zero id, version `ff`, uppercase hex, a short id, or fields
    /// after version 00's flags give none. A later version may add fields.
    #[test]
    fn a_traceparent_gives_its_trace_id_only_when_well_formed() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            TraceId::from_traceparent(parent).unwrap().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "not a traceparent",
        ] {
            assert_eq!(TraceId::from_traceparent(bad), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-whatever";
        assert!(TraceId::from_traceparent(later).is_some());
    }

    /// The context keeps the parent id as the span; a zero parent id is
    /// not a context.
    #[test]
    fn the_context_keeps_the_parent_id_as_the_span() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = TraceContext::from_traceparent(parent).unwrap();
        assert_eq!(c.trace.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            c.span.to_bytes(),
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        let zero = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        assert_eq!(TraceContext::from_traceparent(zero), None);
    }

    /// The id is read from `otel.traceparent` of the context document, and
    /// from nothing else there.
    #[test]
    fn the_context_document_holds_the_traceparent_under_otel() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let read = |d: bson::RawDocumentBuf| TraceId::from_context_document(d.as_bytes());
        assert_eq!(
            read(rawdoc! {"otel": {"traceparent": parent}}),
            TraceId::from_traceparent(parent)
        );
        assert_eq!(read(rawdoc! {"traceparent": parent}), None);
        assert_eq!(read(rawdoc! {"otel": {"tracestate": parent}}), None);
        assert_eq!(read(rawdoc! {"otel": parent}), None);
        assert_eq!(TraceId::from_context_document(b"\x05\x00"), None);
    }
}
