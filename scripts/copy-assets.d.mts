/** Copy every file under `from` that is not TypeScript to the same place under `to`. */
export function copyAssets(from: string, to: string): void;
