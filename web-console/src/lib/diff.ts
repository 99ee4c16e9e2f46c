// A line diff (longest common subsequence) for comparing two versions of a schema side by side.

export interface DiffLine {
  kind: "same" | "del" | "add";
  text: string;
  /** The line's number (from 1) on the left side (same, del) and on the right (same, add). */
  left?: number;
  right?: number;
}

/** Beyond this many cells (changed lines left × right) the middle is shown as replaced whole. */
const MAX_CELLS = 4_000_000;

/**
 * The lines of `a` and `b` as kept, deleted (only in `a`) and added (only in `b`): a longest
 * common subsequence kept, and in a changed run the deletions before the additions.
 */
export function diffLines(a: string[], b: string[]): DiffLine[] {
  // Versions of a schema mostly share their start and end: match those first.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out: DiffLine[] = [];
  const same = (i: number, j: number) => out.push({ kind: "same", text: a[i], left: i + 1, right: j + 1 });
  const del = (i: number) => out.push({ kind: "del", text: a[i], left: i + 1 });
  const add = (j: number) => out.push({ kind: "add", text: b[j], right: j + 1 });
  for (let i = 0; i < start; i++) same(i, i);

  const n = endA - start;
  const m = endB - start;
  if ((n + 1) * (m + 1) > MAX_CELLS) {
    for (let i = start; i < endA; i++) del(i);
    for (let j = start; j < endB; j++) add(j);
  } else {
    // lcs[i * (m + 1) + j]: the length of a longest common subsequence of the middles' suffixes from i and j.
    const lcs = new Uint32Array((n + 1) * (m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * (m + 1) + j] =
          a[start + i] === b[start + j] ? lcs[(i + 1) * (m + 1) + j + 1] + 1 : Math.max(lcs[(i + 1) * (m + 1) + j], lcs[i * (m + 1) + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (a[start + i] === b[start + j]) same(start + i++, start + j++);
      else if (lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) del(start + i++);
      else add(start + j++);
    }
    while (i < n) del(start + i++);
    while (j < m) add(start + j++);
  }

  for (let k = 0; k < a.length - endA; k++) same(endA + k, endB + k);
  return out;
}

export interface DiffRow {
  left?: { line: number; text: string; changed: boolean };
  right?: { line: number; text: string; changed: boolean };
}

/** Side by side: kept lines face each other, a run of deletions faces the additions that follow it. */
export function sideBySide(lines: DiffLine[]): DiffRow[] {
  const rows: DiffRow[] = [];
  for (let k = 0; k < lines.length; ) {
    const line = lines[k];
    if (line.kind === "same") {
      rows.push({ left: { line: line.left!, text: line.text, changed: false }, right: { line: line.right!, text: line.text, changed: false } });
      k++;
      continue;
    }
    const dels: DiffLine[] = [];
    const adds: DiffLine[] = [];
    while (k < lines.length && lines[k].kind === "del") dels.push(lines[k++]);
    while (k < lines.length && lines[k].kind === "add") adds.push(lines[k++]);
    for (let r = 0; r < Math.max(dels.length, adds.length); r++) {
      const d = dels[r];
      const a = adds[r];
      rows.push({
        left: d && { line: d.left!, text: d.text, changed: true },
        right: a && { line: a.right!, text: a.text, changed: true },
      });
    }
  }
  return rows;
}

/** Lines added and deleted. */
export function diffStats(lines: DiffLine[]): { added: number; deleted: number } {
  return { added: lines.filter((l) => l.kind === "add").length, deleted: lines.filter((l) => l.kind === "del").length };
}

/** A text's lines (an empty text has none; a final newline adds no empty line). */
export function splitLines(text: string): string[] {
  if (text === "") return [];
  const lines = text.split(/\r?\n/);
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}
