'use strict';
// Builds build/librlcnode.so (src/rlcnode.c) with the system C compiler.
// `npm install` (or `node build.js`) builds it when it is missing, older than
// its source or built against another library directory; loading the module
// builds it only when it is missing (so processes started with another
// environment never rebuild it under each other). Where libredlockc is
// found, in order:
//   REDLOCKC_INCLUDE_DIR + REDLOCKC_LIB_DIR   (e.g. a build tree)
//   pkg-config redlockc                         (an installed library)
//   ../../c/include + ../../build/c             (this source tree, built)
// The helper gets an rpath to that directory, so it finds libredlockc.so.1
// without LD_LIBRARY_PATH.
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const source = path.join(here, 'src', 'rlcnode.c');
const output = path.join(here, 'build', 'librlcnode.so');
const stamp = path.join(here, 'build', 'flags.json');

function pkgConfig(args) {
  try {
    return execFileSync('pkg-config', [...args, 'redlockc'], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
}

function locate() {
  const env = process.env;
  if (env.REDLOCKC_INCLUDE_DIR && env.REDLOCKC_LIB_DIR) {
    return { cflags: [`-I${env.REDLOCKC_INCLUDE_DIR}`], libdir: env.REDLOCKC_LIB_DIR };
  }
  const libdir = pkgConfig(['--variable=libdir']);
  if (libdir !== null) {
    const cflags = pkgConfig(['--cflags']).split(/\s+/).filter(Boolean);
    return { cflags, libdir };
  }
  const tree = path.resolve(here, '..', '..');
  return { cflags: [`-I${path.join(tree, 'c', 'include')}`], libdir: path.join(tree, 'build', 'c') };
}

function flagsFor(where) {
  const cc = process.env.CC || 'cc';
  return [cc, '-std=c11', '-O2', '-g', '-Wall', '-Wextra', '-fPIC', '-shared',
    '-fvisibility=hidden', ...where.cflags, '-o', '@OUT@', source,
    `-L${where.libdir}`, `-Wl,-rpath,${where.libdir}`, '-lredlockc', '-pthread',
    // Never unmapped (nor libredlockc under it): the family's detached worker
    // threads may still be parked in the library when the process exits, and
    // running unmapped code there crashed Node at exit, now and then, under load.
    '-Wl,-z,nodelete'];
}

// True when the helper exists, is newer than its source and was built with
// the same flags (so switching library trees rebuilds it).
function upToDate(cmd) {
  try {
    const built = fs.statSync(output).mtimeMs;
    return built >= fs.statSync(source).mtimeMs &&
      built >= fs.statSync(path.join(here, 'src', 'rlcnode_family.c')).mtimeMs &&
      built >= fs.statSync(path.join(here, 'src', 'rlcnode_engine.c')).mtimeMs &&
      fs.readFileSync(stamp, 'utf8') === JSON.stringify(cmd);
  } catch {
    return false;
  }
}

function build() {
  const cmd = flagsFor(locate());
  if (upToDate(cmd)) return output;
  fs.mkdirSync(path.dirname(output), { recursive: true });
  console.error(`redlockc: building ${output}`);
  const tmp = `${output}.${process.pid}.tmp`; // builders never share a file
  const args = cmd.slice(1).map((a) => (a === '@OUT@' ? tmp : a));
  execFileSync(cmd[0], args, { stdio: ['ignore', 'inherit', 'inherit'] });
  fs.writeFileSync(stamp, JSON.stringify(cmd));
  fs.renameSync(tmp, output); // atomic: a loading process sees old or new
  return output;
}

// For index.js: the helper as it is, built first only if missing.
function ensureBuilt() {
  return fs.existsSync(output) ? output : build();
}

module.exports = { build, ensureBuilt, output };

if (require.main === module) build();
