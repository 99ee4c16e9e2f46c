// Validates an AsyncAPI document with the AsyncAPI initiative's own parser (the one its tools
// use): exits non-zero, listing them, when it reports an error or a warning. Run by
// tests/it/docs/asyncapi.rs on openapi/asyncapi.json and on what a node serves at /asyncapi.json:
//
//   node asyncapi.test.mjs ../../openapi/asyncapi.json
import { readFileSync } from "node:fs";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const path = process.argv[2];
if (!path) {
  console.error("usage: node asyncapi.test.mjs <document.json>");
  process.exit(2);
}
const { document, diagnostics } = await new Parser().parse(readFileSync(path, "utf8"));
const serious = diagnostics.filter(
  (diagnostic) => diagnostic.severity === DiagnosticSeverity.Error || diagnostic.severity === DiagnosticSeverity.Warning,
);
for (const diagnostic of serious) {
  console.error(`${diagnostic.code}: ${diagnostic.message} at ${diagnostic.path.join(".")}`);
}
if (!document || serious.length > 0) {
  console.error(`${path}: not a valid AsyncAPI document`);
  process.exit(1);
}
console.log(`${path}: valid AsyncAPI ${document.version()}, ${document.allMessages().length} messages`);
