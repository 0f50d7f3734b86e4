# Packaging: the simulator's install rules (component "sim", never installed by
# a plain `cmake --install`; the demo image installs it with `cmake --install
# <build> --component sim`) and the two Debian packages made by one CPack run:
# `cpack -G DEB` in a build directory writes migkit_<version>_<arch>.deb (the
# default install component) and migkit-sim_<version>_<arch>.deb (the
# simulator, depending on migkit of the same version); docs/deploy.md.

# --- The simulator: the demo image and the migkit-sim package --------------
# Layout that `migkit --simulate` looks for (src/cli/main.c):
#   <prefix>/lib/migkit/sim/libnvidia-ml.so.1, <prefix>/lib/migkit/bin/nvidia-smi
install(TARGETS nvidia-ml-sim LIBRARY DESTINATION lib/migkit/sim NAMELINK_SKIP
        COMPONENT sim EXCLUDE_FROM_ALL)
set_target_properties(migkit-sim PROPERTIES INSTALL_RPATH "$ORIGIN/../lib/migkit/sim")
install(TARGETS migkit-sim RUNTIME DESTINATION bin COMPONENT sim EXCLUDE_FROM_ALL)
set_target_properties(nvidia-smi-sim PROPERTIES INSTALL_RPATH "$ORIGIN/../sim")
install(TARGETS nvidia-smi-sim RUNTIME DESTINATION lib/migkit/bin COMPONENT sim EXCLUDE_FROM_ALL)
foreach(t IN ITEMS cuda-sim nvidia-cuda-sim)  # sim/cuda's libcuda.so.1, where built
  if(TARGET ${t})
    install(TARGETS ${t} LIBRARY DESTINATION lib/migkit/sim NAMELINK_SKIP
            COMPONENT sim EXCLUDE_FROM_ALL)
  endif()
endforeach()

# The version, for scripts/build-image's tags.
file(WRITE ${CMAKE_BINARY_DIR}/VERSION "${PROJECT_VERSION}\n")

# --- Debian package ----------------------------------------------------------
set(MIGKIT_DEB_MAINTAINER "migkit maintainers <maintainers@migkit.example.org>" CACHE STRING
    "Maintainer field of the .deb (set it to the distributor's address)")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME migkit)
# One package per install component: "Unspecified" (every install() without
# a COMPONENT) is migkit, "sim" is migkit-sim; "image" (config-manager) is in
# neither.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Unspecified sim)
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_NAME migkit)
set(CPACK_DEBIAN_SIM_PACKAGE_NAME migkit-sim)
set(CPACK_DEBIAN_UNSPECIFIED_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_SIM_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${MIGKIT_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Absolute destinations (/etc/migkit, /var/lib/migkit) land in the package's
# tree, not on the build machine: install with DESTDIR=<staging>.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# Each package's Description starts with its own synopsis line; no
# CPACK_PACKAGE_DESCRIPTION_SUMMARY, which CPack would put before both.
set(MK_DEB_SYNOPSIS "MIG partitioning toolkit for NVIDIA GPUs")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "migkit applies, asserts and exports MIG layouts described in the mig-parted
config format, with minimal changes and verification, and runs as a boot-time
node service (migkit.service), a Kubernetes MIG manager, a kubelet device
plugin and a kube-scheduler extender. It needs NVIDIA's driver
(libnvidia-ml.so.1) at run time; the unit is installed but not enabled.")
set(CPACK_DEBIAN_UNSPECIFIED_DESCRIPTION "${MK_DEB_SYNOPSIS}\n${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
set(CPACK_COMPONENT_SIM_DESCRIPTION "simulated NVIDIA GPUs for migkit (NVML, CUDA driver, nvidia-smi)")
set(CPACK_DEBIAN_SIM_DESCRIPTION "simulated NVIDIA GPUs for migkit (NVML, CUDA driver, nvidia-smi)
What `migkit --simulate MACHINE` runs against: simulators of NVIDIA's NVML
(libnvidia-ml.so.1) and CUDA driver (libcuda.so.1) libraries with MIG, in
/usr/lib/migkit/sim (out of the linker's search path: only migkit and
programs pointed at them load them), the migkit-sim tool that creates and
inspects simulated machines, and a stand-in for nvidia-smi in
/usr/lib/migkit/bin. For trying migkit and testing tools without GPUs;
never needed on a node with GPUs.")
set(CPACK_DEBIAN_SIM_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <package>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libcurl is dlopen()ed by the daemons (kube/, docs/decisions.md), so
# dpkg-shlibdeps cannot see it: named here, the computed list is appended.
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_DEPENDS "libcurl4 (>= 7.77.0)")
# The simulator is of no use without migkit, and speaks only to its own version.
set(CPACK_DEBIAN_SIM_PACKAGE_DEPENDS "migkit (= ${PROJECT_VERSION})")
# migkit-sim's programs load its simulator libraries through their RUNPATH.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/sim/lib ${CMAKE_BINARY_DIR}/sim)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# The GPU driver is not a Debian dependency: NVIDIA ships it in several ways
# (.run installer, CUDA repository, Debian non-free), and migkit dlopens it.
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_SUGGESTS "nvidia-smi, migkit-sim")

set(MK_DEB_DIR ${CMAKE_CURRENT_LIST_DIR}/debian)
set(MK_DEB_OUT ${CMAKE_BINARY_DIR}/deploy/debian)
file(MAKE_DIRECTORY ${MK_DEB_OUT})
foreach(f postinst postrm)
  configure_file(${MK_DEB_DIR}/${f} ${MK_DEB_OUT}/${f} COPYONLY)
endforeach()
# conffiles: every file the install puts under /etc, listed by the pre-build
# script below once the staging tree exists (so a file added later is one too).
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_CONTROL_EXTRA ${MK_DEB_OUT}/conffiles ${MK_DEB_OUT}/postinst ${MK_DEB_OUT}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
execute_process(COMMAND git log -1 --format=%cD
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE MK_DEB_DATE
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT MK_DEB_DATE)
  string(TIMESTAMP MK_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
endif()
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${MIGKIT_DEB_MAINTAINER}")
configure_file(${MK_DEB_DIR}/changelog.in ${MK_DEB_OUT}/changelog @ONLY)
configure_file(${MK_DEB_DIR}/prebuild.cmake.in ${MK_DEB_OUT}/prebuild.cmake @ONLY)
set(CPACK_PRE_BUILD_SCRIPTS ${MK_DEB_OUT}/prebuild.cmake)
file(WRITE ${MK_DEB_OUT}/conffiles "")  # filled by prebuild.cmake

include(CPack)
