// Price overrides (the Prices page): the form, its checks and the input the engine takes. Pure,
// tested with Vitest.
import type { ModelPrice, PriceOverrideInput } from "./ipc";

export type PriceForm = { input: string; output: string; cacheRead: string; cacheWrite: string };

/** The form for a model, filled with the prices in use (USD per million tokens). */
export function toPriceForm(m: ModelPrice): PriceForm {
  const p = m.perMtok;
  const short = (v: string | undefined) => (v === undefined ? "" : v.replace(/(\.\d*?[1-9])0+$|\.0+$/, "$1"));
  return { input: short(p?.input), output: short(p?.output), cacheRead: short(p?.cacheRead), cacheWrite: short(p?.cacheWrite) };
}

const AMOUNT = /^\d+(\.\d+)?$/;

/** Errors by field: input and output are required; cache prices are optional. */
export function validatePrice(f: PriceForm): Partial<Record<keyof PriceForm, string>> {
  const errors: Partial<Record<keyof PriceForm, string>> = {};
  for (const key of ["input", "output"] as const) {
    if (!AMOUNT.test(f[key].trim())) errors[key] = "A price in USD per million tokens, e.g. 3.00";
  }
  for (const key of ["cacheRead", "cacheWrite"] as const) {
    const v = f[key].trim();
    if (v !== "" && !AMOUNT.test(v)) errors[key] = "Empty (the table's) or a price, e.g. 0.30";
  }
  return errors;
}

export function priceInput(f: PriceForm): PriceOverrideInput {
  const opt = (v: string) => (v.trim() === "" ? null : v.trim());
  return { input: f.input.trim(), output: f.output.trim(), cacheRead: opt(f.cacheRead), cacheWrite: opt(f.cacheWrite) };
}

/** Where the price comes from, for the table. */
export function sourceText(m: ModelPrice): string {
  switch (m.source) {
    case "table":
      return "price table";
    case "config":
      return m.version?.startsWith("override-") ? "override" : "config override";
    default:
      return "no price";
  }
}
