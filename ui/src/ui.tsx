// Shared view pieces: data loading with loading/error states, notices, empty states.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { EngineError } from "./ipc";

export interface Loaded<T> {
  data: T | undefined;
  error: EngineError | undefined;
  loading: boolean;
  reload: () => void;
}

export function toEngineError(e: unknown): EngineError {
  return e instanceof EngineError ? e : new EngineError("internal", e instanceof Error ? e.message : String(e));
}

/** Runs `load` on mount and whenever `deps` change; `reload()` runs it again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<EngineError>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const latest = useRef(0);
  useEffect(() => {
    const id = ++latest.current;
    setLoading(true);
    load().then(
      (d) => {
        if (id !== latest.current) return;
        setData(d);
        setError(undefined);
        setLoading(false);
      },
      (e: unknown) => {
        if (id !== latest.current) return;
        setError(toEngineError(e));
        setLoading(false);
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}

/** Wraps an action: `busy` while it runs, its error kept for display. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<EngineError>();
  const run = useCallback(async <T,>(f: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return await f();
    } catch (e) {
      setError(toEngineError(e));
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, clear: () => setError(undefined) };
}

export function ErrorNotice({ error, onRetry }: { error: EngineError; onRetry?: () => void }) {
  const hint =
    error.kind === "unauthorized" || error.status === 401
      ? "The control token is missing or wrong. Open the URL printed by `keyhaven dashboard`, or reload this page from the engine."
      : error.kind === "network"
        ? "Is Keyhaven running? Start it with `keyhaven` and try again."
        : undefined;
  return (
    <div class="notice error" role="alert">
      <strong>Error{error.kind ? ` (${error.kind})` : ""}:</strong> {error.message}
      {hint && <p>{hint}</p>}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

export function Loading({ what = "Loading" }: { what?: string }) {
  return (
    <p class="muted" role="status" aria-live="polite">
      {what}…
    </p>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <p>
        <strong>{title}</strong>
      </p>
      {children}
    </div>
  );
}

/** Loading / error / content for one `useLoad`. */
export function View<T>({ res, children }: { res: Loaded<T>; children: (data: T) => ComponentChildren }) {
  if (res.error && res.data === undefined) return <ErrorNotice error={res.error} onRetry={res.reload} />;
  if (res.data === undefined) return <Loading />;
  return (
    <>
      {res.error && <ErrorNotice error={res.error} onRetry={res.reload} />}
      {children(res.data)}
    </>
  );
}

export function Field({ label, id, error, hint, children }: { label: string; id: string; error?: string; hint?: string; children: ComponentChildren }) {
  return (
    <div class={`field${error ? " invalid" : ""}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && !error && (
        <small id={`${id}-hint`} class="muted">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${id}-error`} class="field-error" role="alert">
          {error}
        </small>
      )}
    </div>
  );
}

export function Stat({ label, value, sub }: { label: string; value: string; sub?: string }) {
  return (
    <div class="stat">
      <div class="stat-label">{label}</div>
      <div class="stat-value">{value}</div>
      {sub && <div class="stat-sub muted">{sub}</div>}
    </div>
  );
}
