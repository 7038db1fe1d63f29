// TypeDoc plugin: name each entry module by its import specifier instead of its file path
// (TypeDoc would call packages/fencelock/src/backends/redis/index.ts "fencelock/src/backends/redis").
import { resolve } from 'node:path';
import { Converter, ReflectionKind } from 'typedoc';
import { apiEntryPoints } from './api-entry-points.mjs';

/** @param {import('typedoc').Application} app */
export function load(app) {
  const root = resolve(import.meta.dirname, '../..');
  const specifierOf = new Map(
    apiEntryPoints(root).map(({ specifier, source }) => [resolve(root, source), specifier]),
  );
  app.converter.on(Converter.EVENT_RESOLVE_BEGIN, (context) => {
    for (const module of context.project.getChildrenByKind(ReflectionKind.Module)) {
      const symbol = context.getSymbolFromReflection(module);
      const file = symbol?.declarations?.[0]?.getSourceFile().fileName;
      const specifier = file === undefined ? undefined : specifierOf.get(resolve(file));
      if (specifier === undefined) {
        app.logger.warn(`api reference: no import specifier for module ${module.name}`);
        continue;
      }
      module.name = specifier;
    }
  });
}
