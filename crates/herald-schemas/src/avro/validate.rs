//! A non-allocating Avro validator: walks the parsed schema and the bytes together.
//!
//! Why not `apache_avro::from_avro_datum`? It builds a `Value` tree (a `String` per string,
//! a `Vec` per record, ...) only for us to drop it; validation runs on every produced
//! message, so it has to cost about as much as reading the bytes once. This walker checks
//! exactly what a decoder would reject, and nothing is allocated unless the payload is
//! invalid (then only the error):
//!
//! - varints are well formed (`int` at most 5 bytes and in `i32` range, `long` at most 10);
//! - booleans are 0 or 1; floats and doubles have their 4 and 8 bytes;
//! - `bytes`/`string` lengths are not negative and fit in what is left (so a length claiming
//!   2 GB in a 10-byte payload fails at once, without allocating), strings are UTF-8;
//! - enum indexes are in range, union branch indexes are in range, fixed sizes are there;
//! - array and map blocks: counts are checked against the bytes left before looping
//!   (every element but a zero-width one takes at least a byte), negative counts are
//!   followed by their byte size, as the spec allows;
//! - the datum ends exactly at the end of the payload: trailing bytes are an error, since
//!   they mean the writer used another schema.
//!
//! Unlike apache-avro's decoder, a payload that ends where a union's branch index should be
//! is truncated, not a null (see [`UNION_INDEX_MISSING`]).
//!
//! Logical types are validated as their underlying type (a `uuid` as a string or 16 bytes,
//! a `decimal` as its bytes or fixed), which is what readers in other languages accept.
//! Nesting deeper than [`MAX_DEPTH`] is refused so that a recursive schema cannot be used to
//! overflow the stack.

use std::collections::HashMap;

use apache_avro::schema::{Name, Schema};

use crate::ValidationError;

/// The deepest nesting of records, arrays and maps accepted.
pub(crate) const MAX_DEPTH: usize = 128;

/// The one place where apache-avro is laxer than the spec: at the end of the input it reads
/// a missing union index as branch 0. Java's decoder (and this one) call it truncated.
/// Why an int encoded in more than 5 bytes is refused (see `Cursor::int`).
pub(crate) const INT_TOO_LONG: &str = "malformed int: longer than 5 bytes";

pub(crate) const UNION_INDEX_MISSING: &str = "truncated: the union branch index is missing";

/// Named types by full name, to follow `Schema::Ref`.
pub(crate) type Names = HashMap<Name, Schema>;

/// A path segment, collected only on the way out of an error.
enum Segment {
    Field(String),
    Index(u64),
    Key,
    Branch(usize),
}

struct Failure {
    /// Innermost first.
    path: Vec<Segment>,
    message: String,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            path: Vec::new(),
            message: message.into(),
        }
    }

    fn at(mut self, segment: Segment) -> Self {
        self.path.push(segment);
        self
    }

    fn into_error(self) -> ValidationError {
        let mut path = String::from("$");
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Field(name) => {
                    path.push('.');
                    path.push_str(name);
                }
                Segment::Index(i) => path.push_str(&format!("[{i}]")),
                Segment::Key => path.push_str("[<key>]"),
                Segment::Branch(i) => path.push_str(&format!("<branch {i}>")),
            }
        }
        ValidationError {
            path,
            message: self.message,
        }
    }
}

/// Out of line, so that formatting messages does not grow `walk`'s stack frame (it recurses
/// once per nesting level).
#[cold]
#[inline(never)]
fn failure(args: std::fmt::Arguments<'_>) -> Failure {
    Failure::new(args.to_string())
}

type Result<T> = std::result::Result<T, Failure>;

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(failure(format_args!(
                "truncated: {what} needs {n} bytes but {} are left",
                self.remaining()
            )));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    #[inline]
    fn long(&mut self) -> Result<i64> {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(Failure::new("truncated: a varint runs past the end"));
            };
            self.pos += 1;
            // The tenth byte holds the 64th bit. Java's BinaryDecoder and
            // apache-avro both keep its lowest bit and drop the rest, and refuse
            // only an eleventh byte; a consumer decodes what we accept, so we
            // read it the same way.
            if shift == 63 && byte & 0x80 != 0 {
                return Err(Failure::new("malformed varint: longer than 10 bytes"));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
            shift += 7;
        }
    }

    #[inline]
    fn int(&mut self) -> Result<i32> {
        let start = self.pos;
        let value = self.long()?;
        if self.pos - start > 5 {
            // Java's BinaryDecoder refuses an int longer than 5 bytes, which
            // apache-avro reads; no encoder writes one, so we side with Java.
            return Err(Failure::new(INT_TOO_LONG));
        }
        if i32::try_from(value).is_err() {
            return Err(failure(format_args!("int out of range: {value}")));
        }
        Ok(value as i32)
    }

    /// A length prefix: not negative, and no more than the bytes left.
    fn length(&mut self, what: &str) -> Result<usize> {
        let len = self.long()?;
        if len < 0 {
            return Err(failure(format_args!("negative {what} length {len}")));
        }
        if len as u64 > self.remaining() as u64 {
            return Err(failure(format_args!(
                "truncated: {what} of {len} bytes but {} are left",
                self.remaining()
            )));
        }
        Ok(len as usize)
    }
}

/// Validates `payload` as exactly one datum of `schema`.
pub(crate) fn validate(
    schema: &Schema,
    names: &Names,
    payload: &[u8],
) -> std::result::Result<(), ValidationError> {
    let mut cursor = Cursor {
        bytes: payload,
        pos: 0,
    };
    walk(schema, names, &mut cursor, 0).map_err(Failure::into_error)?;
    if cursor.remaining() != 0 {
        return Err(ValidationError::at_root(format!(
            "{} trailing bytes after the end of the record (was it written with another schema?)",
            cursor.remaining()
        )));
    }
    Ok(())
}

fn walk(schema: &Schema, names: &Names, c: &mut Cursor<'_>, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(failure(format_args!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    }
    match schema {
        Schema::Null => Ok(()),
        Schema::Boolean => match c.take(1, "a boolean")? {
            [0] | [1] => Ok(()),
            [b, ..] => Err(failure(format_args!("boolean byte is {b}, not 0 or 1"))),
            [] => Err(Failure::new("truncated boolean")),
        },
        Schema::Int | Schema::Date | Schema::TimeMillis => c.int().map(drop),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => c.long().map(drop),
        Schema::Float => c.take(4, "a float").map(drop),
        Schema::Double => c.take(8, "a double").map(drop),
        Schema::Bytes | Schema::BigDecimal => {
            let len = c.length("bytes")?;
            c.take(len, "bytes").map(drop)
        }
        Schema::String => {
            let len = c.length("string")?;
            let bytes = c.take(len, "a string")?;
            std::str::from_utf8(bytes)
                .map(drop)
                .map_err(|e| failure(format_args!("string is not valid UTF-8: {e}")))
        }
        Schema::Uuid => {
            let len = c.length("uuid")?;
            let bytes = c.take(len, "a uuid")?;
            if len == 16 || std::str::from_utf8(bytes).is_ok() {
                Ok(())
            } else {
                Err(Failure::new("uuid is neither 16 bytes nor a UTF-8 string"))
            }
        }
        Schema::Fixed(fixed) => c.take(fixed.size, "a fixed").map(drop),
        Schema::Duration => c.take(12, "a duration").map(drop),
        Schema::Decimal(decimal) => walk(&decimal.inner, names, c, depth),
        Schema::Enum(e) => {
            let index = c.int()?;
            if index < 0 || index as usize >= e.symbols.len() {
                return Err(failure(format_args!(
                    "enum index {index} out of range: {} has {} symbols",
                    e.name.fullname(None),
                    e.symbols.len()
                )));
            }
            Ok(())
        }
        Schema::Union(union) => {
            let index = c.long().map_err(|f| {
                if f.message.starts_with("truncated") {
                    Failure::new(UNION_INDEX_MISSING)
                } else {
                    f
                }
            })?;
            let variants = union.variants();
            let Some(branch) = usize::try_from(index).ok().and_then(|i| variants.get(i)) else {
                return Err(failure(format_args!(
                    "union branch index {index} out of range: the union has {} branches",
                    variants.len()
                )));
            };
            walk(branch, names, c, depth).map_err(|f| f.at(Segment::Branch(index as usize)))
        }
        Schema::Record(record) => {
            for field in &record.fields {
                walk(&field.schema, names, c, depth + 1)
                    .map_err(|f| f.at(Segment::Field(field.name.clone())))?;
            }
            Ok(())
        }
        Schema::Array(array) => {
            let zero_width = is_zero_width(&array.items, names, 0);
            let mut index: u64 = 0;
            loop {
                let count = block_count(c)?;
                if count == 0 {
                    return Ok(());
                }
                if zero_width {
                    // Nothing to read per element, and nothing that could be wrong.
                    index = index.saturating_add(count);
                    continue;
                }
                if count > c.remaining() as u64 {
                    return Err(failure(format_args!(
                        "truncated: array block of {count} items but {} bytes are left",
                        c.remaining()
                    ))
                    .at(Segment::Index(index)));
                }
                for _ in 0..count {
                    walk(&array.items, names, c, depth + 1)
                        .map_err(|f| f.at(Segment::Index(index)))?;
                    index += 1;
                }
            }
        }
        Schema::Map(map) => loop {
            let count = block_count(c)?;
            if count == 0 {
                return Ok(());
            }
            // Every entry has at least its key's length byte.
            if count > c.remaining() as u64 {
                return Err(failure(format_args!(
                    "truncated: map block of {count} entries but {} bytes are left",
                    c.remaining()
                )));
            }
            for _ in 0..count {
                let len = c.length("map key")?;
                let key = c.take(len, "a map key")?;
                let key = std::str::from_utf8(key).map_err(|e| {
                    failure(format_args!("map key is not valid UTF-8: {e}")).at(Segment::Key)
                })?;
                walk(&map.types, names, c, depth + 1)
                    .map_err(|f| f.at(Segment::Field(key.to_owned())))?;
            }
        },
        Schema::Ref { name } => match names.get(name) {
            Some(named) => walk(named, names, c, depth),
            None => Err(failure(format_args!(
                "the schema refers to an unknown type {}",
                name.fullname(None)
            ))),
        },
    }
}

/// Reads an array or map block's item count; a negative count is followed by the block's
/// size in bytes, which we do not need.
fn block_count(c: &mut Cursor<'_>) -> Result<u64> {
    let count = c.long()?;
    if count < 0 {
        c.long()?;
        Ok(count.unsigned_abs())
    } else {
        Ok(count as u64)
    }
}

/// Whether every value of `schema` is encoded as zero bytes (null, fixed of size 0, and
/// records of only those). Such array items are skipped rather than counted one by one.
fn is_zero_width(schema: &Schema, names: &Names, depth: usize) -> bool {
    if depth > 32 {
        return false;
    }
    match schema {
        Schema::Null => true,
        Schema::Fixed(f) => f.size == 0,
        Schema::Record(r) => r
            .fields
            .iter()
            .all(|f| is_zero_width(&f.schema, names, depth + 1)),
        Schema::Ref { name } => names
            .get(name)
            .is_some_and(|s| is_zero_width(s, names, depth + 1)),
        _ => false,
    }
}
