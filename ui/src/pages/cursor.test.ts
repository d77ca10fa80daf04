import { describe, expect, it } from "vitest";
import type { CursorVersion } from "../ipc";
import { failedVersions, selfTestText } from "./cursor";

const version = (over: Partial<CursorVersion>): CursorVersion => ({
  version: "3.16.2",
  firstSeenMs: 1,
  lastSeenMs: 2,
  status: "passed",
  failedStep: null,
  detail: null,
  testedMs: 2,
  notice: null,
  ...over,
});

describe("selfTestText", () => {
  it("names the failed step and what it saw", () => {
    const v = version({ status: "failed", failedStep: "tool_round", detail: "no completed read card" });
    expect(selfTestText(v)).toBe("failed at tool round: no completed read card");
  });
  it("says passed, running and untested plainly", () => {
    expect(selfTestText(version({}))).toBe("passed");
    expect(selfTestText(version({ status: "running" }))).toBe("running…");
    expect(selfTestText(version({ status: "untested" }))).toBe("not tested yet");
  });
});

describe("failedVersions", () => {
  it("keeps only the versions passed through to Cursor's servers", () => {
    const r = { available: true, versions: [version({}), version({ version: "3.17.0", status: "failed" })] };
    expect(failedVersions(r).map((v) => v.version)).toEqual(["3.17.0"]);
  });
});
