//! Serves `.proto` imports to `protox` from memory.
//!
//! A schema's imports are its references, looked up by the reference `name`, which
//! confluent-kafka's serializers set to the imported file's path
//! (`"google/protobuf/timestamp.proto"`, `"acme/address.proto"`). Recent Confluent clients do
//! not register Google's well-known types as references at all, so `google/protobuf/*` files
//! that are not given as references are served from the copies bundled in `protox`.
//!
//! A file may be given as `.proto` source or, as confluent-kafka's Python serializer registers
//! it, as the base64 of its serialized `FileDescriptorProto` (Confluent's registry takes both).

use std::collections::HashMap;

use protox::file::{File, FileResolver, GoogleFileResolver};

/// The name under which the schema's own text is compiled. It is not a path anyone imports.
pub(crate) const MAIN_FILE: &str = "__herald_schema__.proto";

pub(crate) struct MemoryResolver {
    files: HashMap<String, String>,
    google: GoogleFileResolver,
}

impl MemoryResolver {
    pub(crate) fn new(main: &str, references: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut files: HashMap<String, String> = references.into_iter().collect();
        files.insert(MAIN_FILE.to_owned(), main.to_owned());
        MemoryResolver {
            files,
            google: GoogleFileResolver::new(),
        }
    }
}

impl FileResolver for MemoryResolver {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.files.get(name) {
            Some(source) => match descriptor_from_base64(name, source) {
                Some(file) => Ok(file),
                None => File::from_source(name, source),
            },
            None => self.google.open_file(name),
        }
    }
}

/// A file given as the base64 of its serialized `FileDescriptorProto`; `None` for anything
/// else (source text has spaces, `;` and braces, which base64 never does).
fn descriptor_from_base64(name: &str, text: &str) -> Option<File> {
    use base64::Engine;
    use prost_reflect::prost::Message;
    let text = text.trim();
    if text.is_empty()
        || !text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'='))
    {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let mut proto =
        prost_reflect::prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()?;
    // Compiled under the name it is imported by (or the schema's own), whatever it calls itself.
    proto.name = Some(name.to_owned());
    Some(File::from_file_descriptor_proto(proto))
}
