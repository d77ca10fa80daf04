import { describe, expect, it } from "vitest";
import { contextTotal, formatBytes, isTab } from "./calls";

describe("a Cursor call's context blocks", () => {
  it("sizes read as bytes, kilobytes and megabytes", () => {
    expect(formatBytes(62)).toBe("62 B");
    expect(formatBytes(4300)).toBe("4.2 KB");
    expect(formatBytes(1_363_149)).toBe("1.3 MB");
  });
  it("the total counts the blocks and sums their size", () => {
    expect(contextTotal([{ kind: "file", source: "src/a.rs", bytes: 62 }])).toBe("1 block, 62 B in all");
    expect(
      contextTotal([
        { kind: "file", source: "src/a.rs", bytes: 62 },
        { kind: "image", source: "", bytes: 2048 },
      ]),
    ).toBe("2 blocks, 2.1 KB in all");
  });
});

describe("Cursor Tab calls", () => {
  it("are the calls of the cursor-tab client", () => {
    expect(isTab({ client: "cursor-tab" })).toBe(true);
    expect(isTab({ client: "cursor" })).toBe(false);
  });
});
