//! Protobuf compatibility: Confluent's `ProtobufSchema` rules, written out (no crate has
//! them).
//!
//! Protobuf readers match fields by number and skip unknown ones, so adding or removing a
//! field is compatible; what breaks is a number that now means something else. Comparing
//! the writer's file with the reader's, for every message of the writer's file (by full
//! name, nested ones included):
//!
//! - the reader's file lacks the message: **message removed** (or renamed);
//! - for each field number present on both sides:
//!   - the wire types must agree: `int32`, `uint32`, `int64`, `uint64`, `bool` (and enums)
//!     are all varints and read each other; `sint32`/`sint64` (zig-zag) read each other;
//!     `fixed32`/`sfixed32`; `fixed64`/`sfixed64`; `string`/`bytes`; `float` and `double`
//!     only themselves; message types and enums must keep their full names;
//!   - singular ↔ repeated is allowed only for numeric scalars (packed and unpacked
//!     encodings are read either way); for messages, strings and bytes it is a break, and so
//!     is a map becoming anything else;
//!   - a field moved into a oneof that already existed in the writer (**oneof gained an
//!     existing field**), or several fields moved into one new oneof;
//! - proto2 `required` fields: one the reader requires that the writer lacks, or one the
//!   writer has that the reader lacks, is a break (a reader rejects messages without it).
//!
//! Fields added or removed, renamed fields with the same number and type, new messages and
//! new enum values are compatible. Not checked: enum value removals, options, services.

use std::collections::HashSet;

use prost_reflect::{FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};

/// Every reason why messages written with `writer`'s file cannot be read with `reader`'s.
pub(crate) fn can_read(writer: &FileDescriptor, reader: &FileDescriptor) -> Vec<String> {
    let mut problems = Vec::new();
    let mut stack: Vec<MessageDescriptor> = writer.messages().collect();
    while let Some(message) = stack.pop() {
        stack.extend(message.child_messages().filter(|m| !m.is_map_entry()));
        match reader
            .parent_pool()
            .get_message_by_name(message.full_name())
            .filter(|m| m.parent_file().name() == reader.name())
        {
            Some(other) => compare_message(&message, &other, &mut problems),
            None => problems.push(format!(
                "message {} was removed (or renamed)",
                message.full_name()
            )),
        }
    }
    problems
}

/// The Protobuf wire-compatible group of a field kind.
fn group(kind: &Kind) -> String {
    match kind {
        Kind::Int32 | Kind::Uint32 | Kind::Int64 | Kind::Uint64 | Kind::Bool => "varint".into(),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        Kind::Sint32 | Kind::Sint64 => "zigzag".into(),
        Kind::Fixed32 | Kind::Sfixed32 => "fixed32".into(),
        Kind::Fixed64 | Kind::Sfixed64 => "fixed64".into(),
        Kind::String | Kind::Bytes => "length-delimited".into(),
        Kind::Float => "float".into(),
        Kind::Double => "double".into(),
        Kind::Message(m) => format!("message {}", m.full_name()),
    }
}

fn kind_name(field: &FieldDescriptor) -> String {
    let base = match field.kind() {
        Kind::Message(m) => m.full_name().to_owned(),
        Kind::Enum(e) => e.full_name().to_owned(),
        other => format!("{other:?}").to_lowercase(),
    };
    if field.is_map() {
        format!("map ({base})")
    } else if field.is_list() {
        format!("repeated {base}")
    } else {
        base
    }
}

fn is_numeric_scalar(kind: &Kind) -> bool {
    !matches!(kind, Kind::Message(_) | Kind::String | Kind::Bytes)
}

fn compare_message(writer: &MessageDescriptor, reader: &MessageDescriptor, out: &mut Vec<String>) {
    let name = writer.full_name();
    for wf in writer.fields() {
        let Some(rf) = reader.get_field(wf.number()) else {
            if wf.is_required() {
                out.push(format!(
                    "{name}: required field {} ({}) was removed",
                    wf.name(),
                    wf.number()
                ));
            }
            continue;
        };
        let at = format!("{name}: field {} ({})", wf.number(), rf.name());
        let (wk, rk) = (wf.kind(), rf.kind());
        // Enums are varints on the wire, but an enum changed to another enum or to an
        // integer keeps its wire type; only their names matter to JSON readers, so like
        // Confluent compare enums with the varint group.
        let (wg, rg) = (group(&wk), group(&rk));
        let enum_vs_varint = matches!((&wk, &rk), (Kind::Enum(_), _) | (_, Kind::Enum(_)))
            && [&wg, &rg]
                .iter()
                .all(|g| *g == "varint" || g.starts_with("enum "));
        if wg != rg && !enum_vs_varint {
            out.push(format!(
                "{at}: type changed from {} to {}",
                kind_name(&wf),
                kind_name(&rf)
            ));
            continue;
        }
        if wf.is_map() != rf.is_map() {
            out.push(format!(
                "{at}: changed from {} to {}",
                kind_name(&wf),
                kind_name(&rf)
            ));
        } else if wf.is_list() != rf.is_list() && !is_numeric_scalar(&wk) {
            out.push(format!(
                "{at}: label changed from {} to {}",
                kind_name(&wf),
                kind_name(&rf)
            ));
        }
        if rf.is_required() && !wf.is_required() {
            out.push(format!("{at}: became required"));
        }
        if let Some(roneof) = rf.containing_oneof().filter(|o| !o.is_synthetic()) {
            let woneof = wf.containing_oneof().filter(|o| !o.is_synthetic());
            if woneof.is_none() {
                let existed = writer.oneofs().any(|o| o.name() == roneof.name());
                if existed {
                    out.push(format!(
                        "{at}: moved into the existing oneof {}",
                        roneof.name()
                    ));
                }
            }
        }
    }
    // Several writer fields moved into one new oneof: only one of them can be set now.
    for roneof in reader.oneofs().filter(|o| !o.is_synthetic()) {
        if writer.oneofs().any(|o| o.name() == roneof.name()) {
            continue;
        }
        let moved: Vec<String> = roneof
            .fields()
            .filter(|f| writer.get_field(f.number()).is_some())
            .map(|f| f.name().to_owned())
            .collect();
        if moved.len() > 1 {
            out.push(format!(
                "{name}: fields {} moved into the new oneof {}",
                moved.join(", "),
                roneof.name()
            ));
        }
    }
    let wnumbers: HashSet<u32> = writer.fields().map(|f| f.number()).collect();
    for rf in reader.fields().filter(|f| f.is_required()) {
        if !wnumbers.contains(&rf.number()) {
            out.push(format!(
                "{name}: required field {} ({}) was added",
                rf.name(),
                rf.number()
            ));
        }
    }
}
