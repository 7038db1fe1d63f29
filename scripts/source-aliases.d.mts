/** Folders of the packages other workspace code imports by name. */
export const PUBLISHED_PACKAGES: readonly string[];
/** Each export of those packages (`fencelock/redis`) → its source file, relative to the root. */
export function sourceAliases(): Record<string, string>;
