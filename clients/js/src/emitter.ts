/** A tiny typed event emitter that runs in browsers and Node alike (no `events` import). */

export type Listener<T> = (value: T) => void;

export class Emitter<Events extends { [name: string]: unknown }> {
  private readonly listeners = new Map<keyof Events, Set<Listener<never>>>();
  /** Called when a listener throws, so one bad listener cannot stop the others. */
  onListenerError: (error: unknown) => void = (error) => console.error("qim listener failed", error);

  /** Adds a listener; returns the function that removes it. */
  on<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    let set = this.listeners.get(name);
    if (set === undefined) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(listener as Listener<never>);
    return () => this.off(name, listener);
  }

  off<K extends keyof Events>(name: K, listener: Listener<Events[K]>): void {
    this.listeners.get(name)?.delete(listener as Listener<never>);
  }

  /** Resolves with the next value of `name` that passes `filter`, or rejects after `timeoutMs`. */
  next<K extends keyof Events>(
    name: K,
    timeoutMs: number,
    filter: (value: Events[K]) => boolean = () => true,
  ): Promise<Events[K]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        remove();
        reject(new Error(`no ${String(name)} within ${timeoutMs} ms`));
      }, timeoutMs);
      const remove = this.on(name, (value) => {
        if (!filter(value)) return;
        clearTimeout(timer);
        remove();
        resolve(value);
      });
    });
  }

  emit<K extends keyof Events>(name: K, value: Events[K]): void {
    const set = this.listeners.get(name);
    if (set === undefined) return;
    for (const listener of [...set]) {
      try {
        (listener as Listener<Events[K]>)(value);
      } catch (error) {
        this.onListenerError(error);
      }
    }
  }
}
