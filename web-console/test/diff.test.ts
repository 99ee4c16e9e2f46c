import { describe, expect, it } from "vitest";
import { diffLines, diffStats, sideBySide, splitLines } from "../src/lib/diff";

/** A diff in one string per line: `  same`, `- deleted`, `+ added`. */
const show = (a: string[], b: string[]) => diffLines(a, b).map((l) => `${l.kind === "same" ? " " : l.kind === "del" ? "-" : "+"} ${l.text}`);

describe("the line diff", () => {
  it("keeps equal texts whole, numbering both sides", () => {
    expect(diffLines(["a", "b"], ["a", "b"])).toEqual([
      { kind: "same", text: "a", left: 1, right: 1 },
      { kind: "same", text: "b", left: 2, right: 2 },
    ]);
    expect(diffStats(diffLines(["a"], ["a"]))).toEqual({ added: 0, deleted: 0 });
  });

  it("finds insertions at the start, middle and end", () => {
    expect(show(["b", "d"], ["a", "b", "c", "d", "e"])).toEqual(["+ a", "  b", "+ c", "  d", "+ e"]);
    const lines = diffLines(["b", "d"], ["a", "b", "c", "d", "e"]);
    expect(lines[2]).toEqual({ kind: "add", text: "c", right: 3 });
    expect(lines[3]).toEqual({ kind: "same", text: "d", left: 2, right: 4 });
  });

  it("finds deletions", () => {
    expect(show(["a", "b", "c", "d"], ["b", "d"])).toEqual(["- a", "  b", "- c", "  d"]);
    expect(diffStats(diffLines(["a", "b", "c", "d"], ["b", "d"]))).toEqual({ added: 0, deleted: 2 });
  });

  it("shows a replacement as the old lines deleted, then the new ones added", () => {
    expect(show(["{", '  "type": "int"', "}"], ["{", '  "type": "long"', '  "doc": "x"', "}"])).toEqual([
      "  {",
      '-   "type": "int"',
      '+   "type": "long"',
      '+   "doc": "x"',
      "  }",
    ]);
  });

  it("keeps a longest common subsequence", () => {
    const lines = diffLines(["a", "b", "c", "a", "b", "b", "a"], ["c", "b", "a", "b", "a", "c"]);
    expect(lines.filter((l) => l.kind === "same")).toHaveLength(4);
    // Each side is rebuilt from what the diff kept and changed.
    expect(lines.filter((l) => l.kind !== "add").map((l) => l.text)).toEqual(["a", "b", "c", "a", "b", "b", "a"]);
    expect(lines.filter((l) => l.kind !== "del").map((l) => l.text)).toEqual(["c", "b", "a", "b", "a", "c"]);
  });

  it("handles empty sides", () => {
    expect(diffLines([], [])).toEqual([]);
    expect(show([], ["a", "b"])).toEqual(["+ a", "+ b"]);
    expect(show(["a", "b"], [])).toEqual(["- a", "- b"]);
  });

  it("replaces a middle too large to compare line by line", () => {
    const a = ["head", ...Array.from({ length: 2100 }, (_, i) => `a${i}`), "tail"];
    const b = ["head", ...Array.from({ length: 2100 }, (_, i) => `b${i}`), "tail"];
    const lines = diffLines(a, b);
    expect(diffStats(lines)).toEqual({ added: 2100, deleted: 2100 });
    expect(lines[0].kind).toBe("same");
    expect(lines[lines.length - 1]).toEqual({ kind: "same", text: "tail", left: 2102, right: 2102 });
  });
});

describe("side by side", () => {
  it("puts deletions beside the additions that replace them", () => {
    const rows = sideBySide(diffLines(["a", "x", "y", "b"], ["a", "z", "b", "c"]));
    expect(rows).toEqual([
      { left: { line: 1, text: "a", changed: false }, right: { line: 1, text: "a", changed: false } },
      { left: { line: 2, text: "x", changed: true }, right: { line: 2, text: "z", changed: true } },
      { left: { line: 3, text: "y", changed: true }, right: undefined },
      { left: { line: 4, text: "b", changed: false }, right: { line: 3, text: "b", changed: false } },
      { left: undefined, right: { line: 4, text: "c", changed: true } },
    ]);
  });

  it("is empty for two empty texts", () => {
    expect(sideBySide(diffLines([], []))).toEqual([]);
  });
});

describe("splitting lines", () => {
  it("drops a final newline and reads CRLF", () => {
    expect(splitLines("")).toEqual([]);
    expect(splitLines("a\nb\n")).toEqual(["a", "b"]);
    expect(splitLines("a\r\nb")).toEqual(["a", "b"]);
    expect(splitLines("\n")).toEqual([""]);
  });
});
