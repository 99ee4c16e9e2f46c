import { describe, expect, it } from "vitest";
import { formatBytes, formatDuration, formatRate, formatTime, hexDump, murmur2, partitionForKey, previewValue, renderValue } from "../src/lib/format";

describe("durations, sizes, rates and times", () => {
  it("formats durations by their largest units", () => {
    expect(formatDuration(-1)).toBe("forever");
    expect(formatDuration(250)).toBe("250 ms");
    expect(formatDuration(4200)).toBe("4.2 s");
    expect(formatDuration(42_000)).toBe("42 s");
    expect(formatDuration(200_000)).toBe("3 min 20 s");
    expect(formatDuration(604_800_000)).toBe("7 d");
    expect(formatDuration(90_061_000)).toBe("1 d 1 h");
  });

  it("formats bytes in binary units, -1 as unlimited", () => {
    expect(formatBytes(-1)).toBe("unlimited");
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(1073741824)).toBe("1.0 GiB");
  });

  it("formats rates", () => {
    expect(formatRate(undefined)).toBe("–");
    expect(formatRate(0)).toBe("0/s");
    expect(formatRate(2.25)).toBe("2.3/s");
    expect(formatRate(512)).toBe("512/s");
    expect(formatRate(12_345)).toBe("12.3k/s");
  });

  it("formats times in UTC", () => {
    expect(formatTime(1764400000000)).toBe("2025-11-29 07:06:40.000");
  });
});

describe("message values", () => {
  it("pretty-prints JSON values", () => {
    expect(renderValue({ value: { item: "book", qty: 1 } })).toEqual({ kind: "json", text: '{\n  "item": "book",\n  "qty": 1\n}' });
    expect(renderValue({ value: null }).text).toBe("null");
  });

  it("shows bytes as hex or base64", () => {
    const bytes = { value_b64: "AAEC/w==" };
    expect(renderValue(bytes, "base64")).toEqual({ kind: "bytes", text: "AAEC/w==" });
    expect(renderValue(bytes, "hex").text).toBe(`00000000  00 01 02 ff${" ".repeat(36)}  ....`);
    expect(previewValue(bytes)).toBe("4 bytes: 00 01 02 ff");
  });

  it("dumps 16 bytes a line with printable text", () => {
    const dump = hexDump(new TextEncoder().encode("0123456789abcdefXY"));
    expect(dump.split("\n")).toHaveLength(2);
    expect(dump.split("\n")[1]).toMatch(/^00000010  58 59\s+XY$/);
  });

  it("cuts long previews", () => {
    expect(previewValue({ value: "x".repeat(500) }, 20)).toHaveLength(20);
  });
});

describe("the key partitioner", () => {
  // Kafka's UtilsTest.testMurmur2 vectors, as crates/herald-domain/src/partitioner.rs checks them.
  it("is Kafka's murmur2", () => {
    const cases: [string, number][] = [
      ["21", -973932308],
      ["foobar", -790332482],
      ["a-little-bit-long-string", -985981536],
      ["a-little-bit-longer-string", -1486304829],
      ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971],
      ["abc", 479470107],
    ];
    for (const [input, expected] of cases) expect(murmur2(new TextEncoder().encode(input))).toBe(expected);
  });

  it("maps a key to toPositive(murmur2) % partitions", () => {
    expect(partitionForKey("foobar", 1)).toBe(0);
    expect(partitionForKey("abc", 7)).toBe(479470107 % 7);
    expect(partitionForKey("21", 10)).toBe((-973932308 & 0x7fffffff) % 10);
  });
});
