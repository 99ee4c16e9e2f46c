//! Avro compatibility: can a reader with one schema read data written with another?
//!
//! This is the Avro specification's schema resolution, checked structurally:
//!
//! - primitives match themselves, and the writer's type may be promoted: `int` to `long`,
//!   `float` or `double`; `long` to `float` or `double`; `float` to `double`; `string` and
//!   `bytes` both ways. Logical types are compared as their underlying types (as Confluent
//!   does);
//! - records match by unqualified name, or when the reader lists the writer's name among its
//!   aliases; each reader field is looked up in the writer by name or by the reader field's
//!   aliases; a reader field the writer lacks needs a default; writer fields the reader lacks
//!   are skipped (fine);
//! - enums match by name (or alias); every writer symbol must be a reader symbol, unless the
//!   reader has a default symbol;
//! - fixed types match by name and size; arrays by items; maps by values;
//! - a writer union is readable when each of its branches is; a reader union reads a
//!   non-union writer when one of its branches does.
//!
//! Why not `apache_avro::schema_compatibility::SchemaCompatibility`? In 0.21 it ignores
//! aliases (so a rename with aliases is refused), compares references to named types
//! (`Schema::Ref`, how types from schema references appear) by name without looking at them,
//! stops at the first problem, and can panic on some inputs. The registry must answer a
//! `409` with *everything* that breaks, so this walker collects all problems, each with the
//! path of where it is (`/fields/address/fields/zip`), in the spirit of Confluent's verbose
//! messages. The tests check that it agrees with apache-avro where apache-avro is right.

use std::collections::HashSet;

use apache_avro::schema::{Name, Schema};

use super::validate::Names;

/// A schema and the named types it can refer to.
pub(crate) struct Side<'a> {
    pub schema: &'a Schema,
    pub names: &'a Names,
}

/// Every reason why data written with `writer` cannot be read with `reader` (empty: it can).
pub(crate) fn can_read(writer: Side<'_>, reader: Side<'_>) -> Vec<String> {
    let mut checker = Checker {
        wnames: writer.names,
        rnames: reader.names,
        in_progress: HashSet::new(),
        problems: Vec::new(),
    };
    checker.check(writer.schema, reader.schema, &mut String::new(), 0);
    checker.problems
}

struct Checker<'a> {
    wnames: &'a Names,
    rnames: &'a Names,
    /// Named pairs being compared, so recursive types end.
    in_progress: HashSet<(String, String)>,
    problems: Vec<String>,
}

/// The kinds compared: logical types are their underlying type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Named,
    Array,
    Map,
    Union,
}

fn kind(schema: &Schema) -> Kind {
    match schema {
        Schema::Null => Kind::Null,
        Schema::Boolean => Kind::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => Kind::Int,
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Kind::Long,
        Schema::Float => Kind::Float,
        Schema::Double => Kind::Double,
        Schema::Bytes | Schema::BigDecimal => Kind::Bytes,
        Schema::String | Schema::Uuid => Kind::String,
        Schema::Decimal(d) => kind(&d.inner),
        Schema::Array(_) => Kind::Array,
        Schema::Map(_) => Kind::Map,
        Schema::Union(_) => Kind::Union,
        Schema::Record(_) | Schema::Enum(_) | Schema::Fixed(_) | Schema::Duration => Kind::Named,
        Schema::Ref { .. } => Kind::Named,
    }
}

/// A short name of a schema's type for messages.
fn describe(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => format!("record {}", r.name.fullname(None)),
        Schema::Enum(e) => format!("enum {}", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed {} (size {})", f.name.fullname(None), f.size),
        Schema::Ref { name } => name.fullname(None),
        Schema::Duration => "duration".to_owned(),
        Schema::Union(u) => format!(
            "union [{}]",
            u.variants()
                .iter()
                .map(describe)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Schema::Array(a) => format!("array of {}", describe(&a.items)),
        Schema::Map(m) => format!("map of {}", describe(&m.types)),
        Schema::Decimal(d) => format!("decimal ({})", describe(&d.inner)),
        other => format!("{:?}", kind(other)).to_lowercase(),
    }
}

fn names_match(
    writer: &Name,
    reader: &Name,
    reader_aliases: Option<&Vec<apache_avro::schema::Alias>>,
) -> bool {
    writer.name == reader.name
        || reader_aliases.is_some_and(|aliases| {
            aliases.iter().any(|a| {
                a.fullname(reader.namespace.clone()) == writer.fullname(None)
                    || a.name() == writer.name
            })
        })
}

impl Checker<'_> {
    fn problem(&mut self, path: &str, message: String) {
        let at = if path.is_empty() { "/" } else { path };
        self.problems.push(format!("{at}: {message}"));
    }

    fn resolve<'s>(&self, schema: &'s Schema, names: &'s Names) -> &'s Schema {
        match schema {
            Schema::Ref { name } => names.get(name).unwrap_or(schema),
            other => other,
        }
    }

    /// Silent check: does `reader` read `writer` without any problem?
    fn readable(&mut self, writer: &Schema, reader: &Schema, depth: usize) -> bool {
        let saved = std::mem::take(&mut self.problems);
        self.check(writer, reader, &mut String::new(), depth);
        let ok = self.problems.is_empty();
        self.problems = saved;
        ok
    }

    fn check(&mut self, writer: &Schema, reader: &Schema, path: &mut String, depth: usize) {
        if depth > super::validate::MAX_DEPTH {
            return;
        }
        let writer = self.resolve(writer, self.wnames);
        let reader = self.resolve(reader, self.rnames);

        if let Schema::Union(wu) = writer {
            for (i, branch) in wu.variants().iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/union/{i}"));
                if let Schema::Union(_) = reader {
                    self.check(branch, reader, path, depth + 1);
                } else if !self.readable(branch, reader, depth + 1) {
                    self.check(branch, reader, path, depth + 1);
                }
                path.truncate(len);
            }
            return;
        }
        if let Schema::Union(ru) = reader {
            let branches: Vec<Schema> = ru.variants().to_vec();
            if !branches.iter().any(|b| self.readable(writer, b, depth + 1)) {
                let message = format!(
                    "the reader's {} has no branch that reads the writer's {}",
                    describe(reader),
                    describe(writer)
                );
                self.problem(path, message);
            }
            return;
        }

        let (wk, rk) = (kind(writer), kind(reader));
        let promotable = matches!(
            (wk, rk),
            (Kind::Int, Kind::Long | Kind::Float | Kind::Double)
                | (Kind::Long, Kind::Float | Kind::Double)
                | (Kind::Float, Kind::Double)
                | (Kind::String, Kind::Bytes)
                | (Kind::Bytes, Kind::String)
        );
        if promotable {
            return;
        }
        if wk != rk {
            let message = format!(
                "type changed: the writer's {} cannot be read as {}",
                describe(writer),
                describe(reader)
            );
            self.problem(path, message);
            return;
        }
        match (writer, reader) {
            (Schema::Array(w), Schema::Array(r)) => {
                let len = path.len();
                path.push_str("/items");
                self.check(&w.items, &r.items, path, depth + 1);
                path.truncate(len);
            }
            (Schema::Map(w), Schema::Map(r)) => {
                let len = path.len();
                path.push_str("/values");
                self.check(&w.types, &r.types, path, depth + 1);
                path.truncate(len);
            }
            (Schema::Record(w), Schema::Record(r)) => {
                if !names_match(&w.name, &r.name, r.aliases.as_ref()) {
                    let message = format!(
                        "record name changed from {} to {} (add the old name to the reader's aliases)",
                        w.name.fullname(None),
                        r.name.fullname(None)
                    );
                    self.problem(path, message);
                    return;
                }
                let key = (w.name.fullname(None), r.name.fullname(None));
                if !self.in_progress.insert(key.clone()) {
                    return;
                }
                for field in &r.fields {
                    let found = std::iter::once(&field.name)
                        .chain(field.aliases.iter().flatten())
                        .find_map(|n| w.lookup.get(n).map(|&i| &w.fields[i]));
                    let len = path.len();
                    path.push_str("/fields/");
                    path.push_str(&field.name);
                    match found {
                        Some(wf) => self.check(&wf.schema, &field.schema, path, depth + 1),
                        None if field.default.is_none() => {
                            let message = format!(
                                "the reader's field {:?} ({}) is missing from the writer's record and has no default",
                                field.name,
                                describe(&field.schema)
                            );
                            self.problem(path, message);
                        }
                        None => {}
                    }
                    path.truncate(len);
                }
                self.in_progress.remove(&key);
            }
            (Schema::Enum(w), Schema::Enum(r)) => {
                if !names_match(&w.name, &r.name, r.aliases.as_ref()) {
                    let message = format!(
                        "enum name changed from {} to {}",
                        w.name.fullname(None),
                        r.name.fullname(None)
                    );
                    self.problem(path, message);
                    return;
                }
                if r.default.is_none() {
                    let missing: Vec<&str> = w
                        .symbols
                        .iter()
                        .filter(|s| !r.symbols.contains(s))
                        .map(String::as_str)
                        .collect();
                    if !missing.is_empty() {
                        let message = format!(
                            "the reader's enum {} lacks the writer's symbols [{}] and has no default symbol",
                            r.name.fullname(None),
                            missing.join(", ")
                        );
                        self.problem(path, message);
                    }
                }
            }
            (Schema::Fixed(w), Schema::Fixed(r)) => {
                if !names_match(&w.name, &r.name, r.aliases.as_ref()) {
                    let message = format!(
                        "fixed name changed from {} to {}",
                        w.name.fullname(None),
                        r.name.fullname(None)
                    );
                    self.problem(path, message);
                } else if w.size != r.size {
                    let message = format!(
                        "fixed {} changed size from {} to {}",
                        r.name.fullname(None),
                        w.size,
                        r.size
                    );
                    self.problem(path, message);
                }
            }
            (Schema::Duration, Schema::Duration) => {}
            (Schema::Duration, Schema::Fixed(f)) | (Schema::Fixed(f), Schema::Duration)
                if f.size == 12 => {}
            (w, r) if kind(w) != Kind::Named => {
                // Same primitive kind.
                let _ = r;
            }
            (w, r) => {
                let message = format!(
                    "type changed: the writer's {} cannot be read as {}",
                    describe(w),
                    describe(r)
                );
                self.problem(path, message);
            }
        }
    }
}
