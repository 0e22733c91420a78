/** Retrying a request the server refused with `rate_limited`, after its `retry_after_ms`. */
import { sleep } from "./backoff.js";
import { QimError } from "./errors.js";

export interface RetryOptions {
  /** How many `rate_limited` refusals to wait out before giving up (default 5). */
  maxRateLimitRetries?: number;
  /** Told of each refusal before its wait (to show "slow down" in a UI, or count them). */
  onRateLimited?: (error: QimError) => void;
}

/** Runs `attempt`; on `rate_limited` waits `retry_after_ms` (refused requests have no side effect) and tries again. */
export async function withRateLimitRetry<T>(attempt: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const limit = options.maxRateLimitRetries ?? 5;
  for (let tries = 0; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof QimError) || error.code !== "rate_limited" || tries >= limit) throw error;
      options.onRateLimited?.(error);
      await sleep(Math.max(0, error.retryAfterMs ?? 1000)).promise;
    }
  }
}
