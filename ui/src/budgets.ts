// Pure view models of the Budgets page, the Overview banner and the tray line (no DOM, no
// engine calls): unit-tested.
import type { Budget, BudgetAction, BudgetInput, BudgetPeriod, BudgetReport, BudgetScope } from "./ipc";
import { formatCost } from "./format";

export interface BudgetForm {
  name: string;
  scope: BudgetScope;
  target: string;
  period: BudgetPeriod;
  limitUsd: string;
  softPercent: string;
  onLimit: BudgetAction;
  downgradeTo: string;
}

export const EMPTY_BUDGET: BudgetForm = {
  name: "",
  scope: "all",
  target: "",
  period: "month",
  limitUsd: "",
  softPercent: "80",
  onLimit: "refuse",
  downgradeTo: "",
};

export const SCOPES: { value: BudgetScope; label: string }[] = [
  { value: "all", label: "Everything" },
  { value: "client", label: "A client (cursor, claude-code, codex, a client token)" },
  { value: "provider", label: "A provider" },
  { value: "model", label: "A model or group" },
];

export const PERIODS: { value: BudgetPeriod; label: string }[] = [
  { value: "day", label: "Day" },
  { value: "week", label: "Week (from Monday)" },
  { value: "month", label: "Month" },
];

export const toBudgetForm = (b: Budget): BudgetForm => ({
  name: b.name,
  scope: b.scope,
  target: b.target ?? "",
  period: b.period,
  limitUsd: String(b.limitUsd),
  softPercent: String(b.softPercent),
  onLimit: b.onLimit,
  downgradeTo: b.downgradeTo ?? "",
});

/** Field errors of the form (the engine validates again, e.g. that the model exists). */
export function validateBudget(f: BudgetForm): Partial<Record<keyof BudgetForm, string>> {
  const e: Partial<Record<keyof BudgetForm, string>> = {};
  if (!f.name.trim()) e.name = "Give the budget a name.";
  if (f.scope !== "all" && !f.target.trim()) e.target = "Name the client, provider, or model or group.";
  const limit = Number(f.limitUsd);
  if (!f.limitUsd.trim() || !Number.isFinite(limit) || limit <= 0) e.limitUsd = "A limit in USD above 0, e.g. 50";
  const soft = Number(f.softPercent);
  if (!Number.isInteger(soft) || soft < 1 || soft > 100) e.softPercent = "A whole percent from 1 to 100.";
  if (f.onLimit === "downgrade" && !f.downgradeTo.trim()) e.downgradeTo = "Name the cheaper model or group.";
  return e;
}

/** The POST / PUT body. */
export const budgetInput = (f: BudgetForm): BudgetInput => ({
  name: f.name.trim(),
  scope: f.scope,
  target: f.scope === "all" ? null : f.target.trim(),
  period: f.period,
  limitUsd: Number(f.limitUsd),
  softPercent: Number(f.softPercent),
  onLimit: f.onLimit,
  downgradeTo: f.onLimit === "downgrade" ? f.downgradeTo.trim() : null,
});

/** What a budget limits, in words. */
export function scopeText(b: Pick<Budget, "scope" | "target">): string {
  switch (b.scope) {
    case "all":
      return "everything";
    case "client":
      return `client ${b.target}`;
    case "provider":
      return `provider ${b.target}`;
    case "model":
      return `model ${b.target}`;
  }
}

/** "$3.12 of $10.00 (31 %)". */
export function spendText(b: Budget): string {
  return `${formatCost(b.spentMicros)} of ${formatCost(Math.round(b.limitUsd * 1_000_000))} (${b.percent} %)`;
}

/** What happens at the limit. */
export function actionText(b: Budget): string {
  return b.onLimit === "refuse" ? "refuse new calls" : `send new conversations to ${b.downgradeTo}`;
}

/** The Overview banner: one line per budget at or past its soft threshold (nothing when none is). */
export function bannerLines(r: BudgetReport, resetText: (ms: number) => string): { level: "warning" | "exceeded"; text: string }[] {
  return r.budgets
    .filter((b) => b.level !== "ok")
    .map((b) => ({
      level: b.level === "exceeded" ? ("exceeded" as const) : ("warning" as const),
      text:
        b.level === "exceeded"
          ? `Budget “${b.name}” is used up (${spendText(b)}): Keyhaven will ${actionText(b)} until ${resetText(b.resetMs)}.`
          : `Budget “${b.name}” has reached ${b.percent} % (${spendText(b)}); at the limit Keyhaven will ${actionText(b)}.`,
    }));
}
