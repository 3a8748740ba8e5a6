# Debian packages, one per install component (cpack -G DEB in the build tree):
#   libredlockc1      runtime: libredlockc.so.1 and the real file
#   libredlockc-dev   dev: redlockc.h, libredlockc.so, redlockc.pc, CMake package
#   redlockc          tools: the redlockc command and its man page
#   python3-redlockc, lua-redlockc: the bindings, when they were built and
#                     install into the components "python" and "lua"
# Debian's own paths want CMAKE_INSTALL_PREFIX=/usr at configure time (then
# GNUInstallDirs gives lib/<multiarch>); see the Packaging section of README.md.
# The project has no mail address of its own: the default names the project
# and an address under the reserved .invalid domain (RFC 2606: it can never
# reach a stranger); a distribution that builds these packages sets its own.
set(rlc_deb_maintainer "libredlockc maintainers <maintainers@libredlockc.invalid>")
set(RLC_DEB_MAINTAINER "${rlc_deb_maintainer}" CACHE STRING "Maintainer field of the Debian packages")
# A build directory configured by an older tree caches the localhost
# placeholder this default replaces; tests/packaging/metadata_check.py refuses it.
if(RLC_DEB_MAINTAINER STREQUAL "libredlockc developers <redlockc@localhost>")
  set_property(CACHE RLC_DEB_MAINTAINER PROPERTY VALUE "${rlc_deb_maintainer}")
endif()
# Where the project lives (the Go module's path names it too).
set(RLC_HOMEPAGE "https://github.com/libredlockc/libredlockc")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME redlockc)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${RLC_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${RLC_HOMEPAGE}")
# Values reach CPackConfig.cmake escaped, so a description may hold quotes
# (without it `require "redlockc"` came out as `require ;redlockc"`).
set(CPACK_VERBATIM_VARIABLES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

# Depends from the binaries' real needs (libc6, libhiredis0.14, libssl3), by dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libredlockc1 gets a shlibs file (and ldconfig in postinst), so that packages
# built against it depend on "libredlockc1 (>= <this version>)".
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

set(rlc_deb_version "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libredlockc1)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "distributed locks on Redis - shared library
libredlockc gives any runtime distributed locks on Redis: Redisson-compatible
reentrant locks kept alive by a watchdog, and the Redlock algorithm over N
independent Redis masters, behind one stable C ABI.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libredlockc-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# No libhiredis-dev: hiredis is private to the .so (Libs.private only).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libredlockc1 (= ${rlc_deb_version})")
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed locks on Redis - development files
The header redlockc.h, the libredlockc.so link, redlockc.pc for pkg-config and
the CMake package (find_package(redlockc 1) gives redlockc::redlockc).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME redlockc)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
# dpkg-shlibdeps cannot know which package gives libredlockc.so.1 before it is
# installed, so the tool's libc6 dependency comes from shlibdeps with the
# runtime package's directory as a private one, and libredlockc1 is named here.
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libredlockc1 (= ${rlc_deb_version})")
# Relative to the directory CPack stages each component in (…/<component>).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
  "../runtime${CPACK_PACKAGING_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "distributed locks on Redis - command-line tool
redlockc runs a command while holding a distributed lock on Redis, like
flock(1) across machines: watchdog-renewed, exit status propagated, the
command stopped if the lock is lost.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-redlockc)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# The extension module is built for one CPython minor version.
set(rlc_py_dep python3)
if(RLC_BUILD_PYTHON)
  set(rlc_py_exe ${Python3_EXECUTABLE})
  if(NOT rlc_py_exe)
    set(rlc_py_exe /usr/bin/python3) # the bindings' own default
  endif()
  execute_process(COMMAND ${rlc_py_exe} -c
    "import sys; print('%d.%d %d.%d' % (sys.version_info[0], sys.version_info[1], sys.version_info[0], sys.version_info[1] + 1))"
    OUTPUT_VARIABLE rlc_py_ver OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rlc_py_rc)
  if(rlc_py_rc EQUAL 0)
    separate_arguments(rlc_py_ver)
    list(GET rlc_py_ver 0 rlc_py_this)
    list(GET rlc_py_ver 1 rlc_py_next)
    set(rlc_py_dep "python3 (>= ${rlc_py_this}), python3 (<< ${rlc_py_next})")
  endif()
endif()
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "libredlockc1 (= ${rlc_deb_version}), ${rlc_py_dep}")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION "distributed locks on Redis - Python 3 module
import redlockc: Client, Lock, exceptions per failure, over libredlockc.")
set(CPACK_DEBIAN_LUA_PACKAGE_NAME lua-redlockc)
set(CPACK_DEBIAN_LUA_PACKAGE_SECTION interpreters)
set(CPACK_DEBIAN_LUA_PACKAGE_DEPENDS "libredlockc1 (= ${rlc_deb_version}), lua5.4")
set(CPACK_DEBIAN_LUA_DESCRIPTION "distributed locks on Redis - Lua 5.4 module
require \"redlockc\": clients and locks over libredlockc.")

# Each package's copyright file (Debian policy: /usr/share/doc/<package>/copyright).
foreach(comp runtime dev tools python lua)
  string(TOUPPER "${comp}" COMP)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${COMP}_PACKAGE_NAME}
    RENAME copyright COMPONENT ${comp} EXCLUDE_FROM_ALL)
endforeach()
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)

# Package what this build installs, and nothing that has no package name above
# (an install rule without COMPONENT lands in "Unspecified": say so).
get_cmake_property(rlc_components COMPONENTS)
set(CPACK_COMPONENTS_ALL "")
foreach(comp ${rlc_components})
  string(TOUPPER "${comp}" COMP)
  if(DEFINED CPACK_DEBIAN_${COMP}_PACKAGE_NAME)
    list(APPEND CPACK_COMPONENTS_ALL ${comp})
  else()
    message(STATUS "packaging: install component '${comp}' goes into no Debian package")
  endif()
endforeach()

include(CPack)
