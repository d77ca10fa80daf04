import { describe, expect, it } from "vitest";
import type { Budget, BudgetReport } from "./ipc";
import { createApi } from "./ipc";
import { EMPTY_BUDGET, bannerLines, budgetInput, scopeText, spendText, toBudgetForm, validateBudget } from "./budgets";

const budget = (over: Partial<Budget> = {}): Budget => ({
  name: "monthly",
  scope: "all",
  target: null,
  period: "month",
  limitUsd: 10,
  softPercent: 80,
  onLimit: "refuse",
  downgradeTo: null,
  spentMicros: 8_500_000,
  spentUsd: 8.5,
  inFlightMicros: 0,
  percent: 85,
  level: "warning",
  periodStartMs: 0,
  resetMs: 1_000,
  ...over,
});

const report = (budgets: Budget[]): BudgetReport => ({ budgets, todayMicros: 3_120_000, todayUsd: 3.12, nearest: budgets[0]?.name ?? null, utcOffsetS: 3600, timeZone: "local", alerts: [] });

describe("budgets page", () => {
  it("validate the form before it is sent", () => {
    expect(Object.keys(validateBudget(EMPTY_BUDGET)).sort()).toEqual(["limitUsd", "name"]);
    const ok = { ...EMPTY_BUDGET, name: "m", limitUsd: "50" };
    expect(validateBudget(ok)).toEqual({});
    expect(validateBudget({ ...ok, scope: "model" }).target).toMatch(/model or group/);
    expect(validateBudget({ ...ok, limitUsd: "-1" }).limitUsd).toMatch(/above 0/);
    expect(validateBudget({ ...ok, softPercent: "101" }).softPercent).toMatch(/1 to 100/);
    expect(validateBudget({ ...ok, onLimit: "downgrade" }).downgradeTo).toMatch(/cheaper model/);
  });
  it("send the scope's target only when it has one, and downgradeTo only for downgrades", () => {
    const f = { ...EMPTY_BUDGET, name: " team ", scope: "all" as const, target: "stale", limitUsd: "12.5", downgradeTo: "small" };
    expect(budgetInput(f)).toEqual({ name: "team", scope: "all", target: null, period: "month", limitUsd: 12.5, softPercent: 80, onLimit: "refuse", downgradeTo: null });
    const d = { ...f, scope: "model" as const, target: " big ", onLimit: "downgrade" as const, period: "week" as const };
    expect(budgetInput(d)).toEqual({ name: "team", scope: "model", target: "big", period: "week", limitUsd: 12.5, softPercent: 80, onLimit: "downgrade", downgradeTo: "small" });
    expect(toBudgetForm(budget({ scope: "client", target: "cursor" }))).toMatchObject({ scope: "client", target: "cursor", limitUsd: "10", softPercent: "80" });
  });
  it("word the spend and the scope", () => {
    expect(spendText(budget())).toBe("$8.50 of $10.00 (85 %)");
    expect(scopeText(budget({ scope: "provider", target: "anthropic" }))).toBe("provider anthropic");
    expect(scopeText(budget())).toBe("everything");
  });
  it("show a banner only for budgets past their threshold, saying what happens", () => {
    const ok = budget({ name: "quiet", level: "ok", percent: 10, spentMicros: 1_000_000 });
    expect(bannerLines(report([ok]), String)).toEqual([]);
    const lines = bannerLines(
      report([budget(), budget({ name: "big", scope: "model", target: "big", level: "exceeded", percent: 104, spentMicros: 10_400_000, onLimit: "downgrade", downgradeTo: "small" }), ok]),
      (ms) => `T${ms}`,
    );
    expect(lines).toEqual([
      { level: "warning", text: "Budget “monthly” has reached 85 % ($8.50 of $10.00 (85 %)); at the limit Keyhaven will refuse new calls." },
      { level: "exceeded", text: "Budget “big” is used up ($10.40 of $10.00 (104 %)): Keyhaven will send new conversations to small until T1000." },
    ]);
  });
  it("call the budget routes", async () => {
    const calls: [string, string, unknown][] = [];
    const api = createApi({
      request: async <T,>(method: string, path: string, body?: unknown) => {
        calls.push([method, path, body]);
        return report([]) as T;
      },
      download: async () => "",
    });
    const input = budgetInput({ ...EMPTY_BUDGET, name: "a b", limitUsd: "1" });
    await api.budgets();
    await api.createBudget(input);
    await api.updateBudget("a b", input);
    await api.deleteBudget("a b");
    expect(calls).toEqual([
      ["GET", "/api/budgets", undefined],
      ["POST", "/api/budgets", input],
      ["PUT", "/api/budgets/a%20b", input],
      ["DELETE", "/api/budgets/a%20b", undefined],
    ]);
  });
});
