'use strict';
// The native part of this package: librlcnode.so, a small helper
// (src/rlcnode*.c) over libredlockc, loaded with koffi. It comes from the
// first of these that fits:
//
//   1. prebuilds/<platform>-<arch>/librlcnode.so, shipped in the npm tarball
//      (linux-x64, glibc): libredlockc compiled in, and hiredis, libssl and
//      libcrypto beside it, found through an RPATH of $ORIGIN, so nothing
//      from the system but glibc is needed (no compiler, no pkg-config).
//      Skipped when REDLOCKC_BUILD_FROM_SOURCE=1, when REDLOCKC_INCLUDE_DIR
//      and REDLOCKC_LIB_DIR name a library, or when it does not load here.
//   2. build/librlcnode.so, compiled here with the system C compiler against
//      an installed libredlockc. Where libredlockc is found, in order:
//        REDLOCKC_INCLUDE_DIR + REDLOCKC_LIB_DIR   (e.g. a build tree)
//        pkg-config redlockc                         (an installed library)
//        ../../c/include + ../../build/c             (this source tree, built)
//      The helper gets an rpath to that directory, so it finds
//      libredlockc.so.1 without LD_LIBRARY_PATH.
//
// `node build.js` (npm's install script) checks 1 and builds 2 only when 1
// does not fit; 2 is rebuilt when older than its sources or built against
// another library directory. Loading the module builds 2 only when it is
// missing (processes started with another environment never rebuild it
// under each other).
//
// `node build.js --prebuild` (npm pack's prepack) makes 1 from a CMake build
// of this checkout (RLC_BUILD_DIR, default ../../build): its static archive
// of the library (target rlc_internal) linked into the helper, and the
// shared libraries that still needs copied beside it. `--clean` (postpack)
// removes it again, so the checkout's own tests keep using the tree's build.
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const sources = ['rlcnode.c', 'rlcnode_engine.c'].map((f) => path.join(here, 'src', f));
const output = path.join(here, 'build', 'librlcnode.so');
const stamp = path.join(here, 'build', 'flags.json');
const prebuildRoot = path.join(here, 'prebuilds');
const platform = `${process.platform}-${process.arch}`;
const prebuildDir = path.join(prebuildRoot, platform);
const prebuilt = path.join(prebuildDir, 'librlcnode.so');

// The libraries of the C runtime itself: never bundled (the system's glibc
// is the one thing a prebuilt relies on).
const SYSTEM_LIBS = /^(linux-vdso|linux-gate|ld-linux[-\w.]*|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so/;

class BuildError extends Error {}

function pkgConfig(args) {
  try {
    return execFileSync('pkg-config', [...args, 'redlockc'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

function explicitLibrary() {
  return Boolean(process.env.REDLOCKC_INCLUDE_DIR && process.env.REDLOCKC_LIB_DIR);
}

function locate() {
  const env = process.env;
  if (explicitLibrary()) {
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
    '-fvisibility=hidden', ...where.cflags, '-o', '@OUT@', sources[0],
    `-L${where.libdir}`, `-Wl,-rpath,${where.libdir}`, '-lredlockc'];
}

// True when the helper exists, is newer than its sources and was built with
// the same flags (so switching library trees rebuilds it).
function upToDate(cmd) {
  try {
    const built = fs.statSync(output).mtimeMs;
    return sources.every((s) => built >= fs.statSync(s).mtimeMs) &&
      fs.readFileSync(stamp, 'utf8') === JSON.stringify(cmd);
  } catch {
    return false;
  }
}

// What a user needs to hear when building from source cannot work, instead
// of the compiler's own "redlockc.h: No such file or directory".
function why(where, cc, error) {
  const none = `no prebuilt native part fits this platform (${platform}${isGlibc() ? '' : ', not glibc'})` +
    (process.env.REDLOCKC_BUILD_FROM_SOURCE === '1' ? ' or REDLOCKC_BUILD_FROM_SOURCE=1 is set' : '');
  if (error.code === 'ENOENT') {
    return `${none}, and building it from source needs a C compiler: '${cc}' was not found (set CC)`;
  }
  const header = where.cflags.some((f) => f.startsWith('-I') && fs.existsSync(path.join(f.slice(2), 'redlockc.h')));
  if (!header || !fs.existsSync(path.join(where.libdir, 'libredlockc.so'))) {
    return `${none}, and building it from source needs libredlockc: install it and set ` +
      'PKG_CONFIG_PATH=<prefix>/lib/pkgconfig (so `pkg-config redlockc` finds it), or set ' +
      'REDLOCKC_INCLUDE_DIR and REDLOCKC_LIB_DIR to a build of it';
  }
  return `${none}, and building it from source failed (the compiler's message is above)`;
}

function build() {
  const where = locate();
  const cmd = flagsFor(where);
  if (upToDate(cmd)) return output;
  fs.mkdirSync(path.dirname(output), { recursive: true });
  console.error(`redlockc: building ${output}`);
  const tmp = `${output}.${process.pid}.tmp`; // builders never share a file
  const args = cmd.slice(1).map((a) => (a === '@OUT@' ? tmp : a));
  try {
    execFileSync(cmd[0], args, { stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (e) {
    throw new BuildError(`redlockc: ${why(where, cmd[0], e)}`);
  }
  fs.writeFileSync(stamp, JSON.stringify(cmd));
  fs.renameSync(tmp, output); // atomic: a loading process sees old or new
  return output;
}

function isGlibc() {
  if (process.platform !== 'linux') return false;
  const report = process.report && process.report.getReport();
  return Boolean(report && report.header && report.header.glibcVersionRuntime);
}

// The prebuilt helper's path when it may serve this process, else null.
function prebuiltFits() {
  if (process.env.REDLOCKC_BUILD_FROM_SOURCE === '1' || explicitLibrary()) return null;
  if (!fs.existsSync(prebuilt) || !isGlibc()) return null;
  return prebuilt;
}

// The helper loaded with koffi (one handle for the whole module): the
// prebuilt if it fits and loads, else the one built from source.
let loaded = null;
function loadNative(koffi) {
  if (loaded) return loaded;
  const p = prebuiltFits();
  if (p) {
    try {
      loaded = koffi.load(p);
      return loaded;
    } catch (e) {
      if (process.env.REDLOCKC_DEBUG) console.error(`redlockc: the prebuilt ${p} did not load: ${e.message}`);
    }
  }
  loaded = koffi.load(fs.existsSync(output) ? output : build());
  return loaded;
}

// npm's install script: nothing to do where the prebuilt loads.
function install() {
  const p = prebuiltFits();
  if (p) {
    let koffi;
    try {
      koffi = require('koffi');
    } catch {
      return p; // not installed beside us (a linked folder): loading tries it
    }
    try {
      koffi.load(p);
      return p;
    } catch (e) {
      console.error(`redlockc: the prebuilt ${p} does not load here (${e.message}); building from source`);
    }
  }
  return build();
}

// ---- npm pack: the prebuilt for this platform -----------------------------

function run(cmd, args, opts = {}) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...opts });
}

// {soname: path} of what ldd resolves for file, the C runtime left out.
function dependencies(file) {
  const deps = {};
  for (const line of run('ldd', [file]).split('\n')) {
    const m = line.match(/^\s*(\S+)\s+=>\s+(\S+)/);
    if (m && !SYSTEM_LIBS.test(m[1])) deps[m[1]] = m[2];
    if (m && m[2] === 'not') throw new BuildError(`redlockc: ${file} needs ${m[1]}, which is not found`);
  }
  return deps;
}

// A bundled library's license goes with it: Debian keeps it in the
// package's /usr/share/doc/<package>/copyright.
function copyLicense(lib, to) {
  let pkg;
  try {
    pkg = run('dpkg-query', ['-S', lib], { stdio: ['ignore', 'pipe', 'ignore'] }).split(':')[0];
  } catch {
    return; // not from a Debian package: the builder's to bring
  }
  const file = `/usr/share/doc/${pkg}/copyright`;
  if (fs.existsSync(file)) fs.copyFileSync(file, to);
}

// Copies what file needs (and what that needs) into dir, under its soname.
function bundle(file, dir) {
  const todo = [file];
  const copied = new Set();
  for (let i = 0; i < todo.length && i < 64; i++) {
    for (const [soname, from] of Object.entries(dependencies(todo[i]))) {
      const to = path.join(dir, soname);
      if (copied.has(soname) || path.dirname(fs.realpathSync(from)) === fs.realpathSync(dir)) continue;
      fs.copyFileSync(fs.realpathSync(from), to);
      copyLicense(fs.realpathSync(from), `${to}.copyright`);
      copied.add(soname);
      todo.push(to);
    }
  }
  return [...copied];
}

function prebuild() {
  if (process.platform !== 'linux') throw new BuildError('redlockc: --prebuild makes Linux prebuilts only');
  const buildDir = path.resolve(process.env.RLC_BUILD_DIR || path.join(here, '..', '..', 'build'));
  let cache;
  try {
    cache = fs.readFileSync(path.join(buildDir, 'CMakeCache.txt'), 'utf8');
  } catch {
    throw new BuildError(`redlockc: --prebuild needs a CMake build of libredlockc in ${buildDir} (set RLC_BUILD_DIR)`);
  }
  // The header of the sources that build was made from.
  const top = (cache.match(/^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$/m) || [])[1];
  if (!top) throw new BuildError(`redlockc: ${buildDir}/CMakeCache.txt names no source directory`);
  run('cmake', ['--build', buildDir, '--target', 'rlc_internal'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const archive = path.join(buildDir, 'c', 'librlc_internal.a');
  let deps = ['-lhiredis', '-lssl', '-lcrypto'];
  try {
    deps = run('pkg-config', ['--libs', 'hiredis', 'openssl']).trim().split(/\s+/);
  } catch {
    // Debian's names, as above
  }
  fs.rmSync(prebuildDir, { recursive: true, force: true });
  fs.mkdirSync(prebuildDir, { recursive: true });
  const tmp = `${prebuilt}.${process.pid}.tmp`;
  run(process.env.CC || 'cc', ['-std=c11', '-O2', '-Wall', '-Wextra', '-fPIC', '-shared',
    '-fvisibility=hidden', `-I${path.join(top, 'c', 'include')}`, '-o', tmp, sources[0],
    '-Wl,--whole-archive', archive, '-Wl,--no-whole-archive',
    // Every library it needs stays a direct dependency, and DT_RPATH (not
    // RUNPATH) is searched for their own dependencies too (libssl's libcrypto).
    '-Wl,--no-as-needed', ...deps, '-pthread', '-lm', '-Wl,--no-undefined',
    '-Wl,--disable-new-dtags', '-Wl,-rpath,$ORIGIN'], { stdio: ['ignore', 'inherit', 'inherit'] });
  fs.renameSync(tmp, prebuilt);
  const copied = bundle(prebuilt, prebuildDir);
  const strays = Object.entries(dependencies(prebuilt)).filter(([, p]) => path.dirname(p) !== prebuildDir);
  if (strays.length) throw new BuildError(`redlockc: the prebuilt still needs ${strays.map((s) => s.join(' => ')).join(', ')}`);
  console.error(`redlockc: prebuilt ${path.relative(here, prebuilt)} with ${copied.join(', ')} beside it`);
  return prebuilt;
}

module.exports = { build, loadNative, install, output, prebuilt, prebuiltFits, BuildError };

if (require.main === module) {
  try {
    const arg = process.argv[2];
    if (arg === '--prebuild') prebuild();
    else if (arg === '--clean') fs.rmSync(prebuildRoot, { recursive: true, force: true });
    else install();
  } catch (e) {
    if (!(e instanceof BuildError)) throw e;
    console.error(e.message);
    process.exitCode = 1;
  }
}
