/** Reconnect delays: exponential, capped, jittered so a fleet does not reconnect in lockstep. */

export interface BackoffOptions {
  initialMs?: number;
  maximumMs?: number;
  factor?: number;
  /** Fraction of the delay that may be taken off at random (0: none, 1: "full jitter"). */
  jitter?: number;
  /** Injectable randomness in [0, 1), for tests. */
  random?: () => number;
}

export class Backoff {
  readonly initialMs: number;
  readonly maximumMs: number;
  readonly factor: number;
  readonly jitter: number;
  private readonly random: () => number;

  constructor(options: BackoffOptions = {}) {
    this.initialMs = options.initialMs ?? 200;
    this.maximumMs = options.maximumMs ?? 10_000;
    this.factor = options.factor ?? 2;
    this.jitter = options.jitter ?? 0.5;
    this.random = options.random ?? Math.random;
  }

  /** Milliseconds to wait before attempt `attempt` (0-based); the exponent is clamped. */
  delayMs(attempt: number): number {
    const ceiling = Math.min(this.maximumMs, this.initialMs * this.factor ** Math.min(attempt, 64));
    return ceiling * (1 - this.jitter * this.random());
  }
}

/** Resolves after `ms`; the timer can be cancelled through the returned handle. */
export function sleep(ms: number): { promise: Promise<void>; cancel: () => void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((done) => {
    resolve = done;
    timer = setTimeout(done, ms);
  });
  return {
    promise,
    cancel: () => {
      if (timer !== undefined) clearTimeout(timer);
      resolve();
    },
  };
}
