import { describe, expect, it } from "vitest";
import type { DoctorReport } from "../ipc";
import { doctorSummary } from "./doctor";

const check = (status: DoctorReport["checks"][number]["status"]) => ({ area: "x", title: "t", status, detail: "d", fix: null });

describe("doctorSummary", () => {
  it("counts failures, warnings and passes", () => {
    const r: DoctorReport = { ok: false, checks: [check("fail"), check("fail"), check("warn"), check("ok"), check("skip")] };
    expect(doctorSummary(r)).toBe("2 failed, 1 warning, 1 passed");
  });
  it("leaves out empty counts", () => {
    expect(doctorSummary({ ok: true, checks: [check("ok"), check("ok")] })).toBe("2 passed");
  });
});
