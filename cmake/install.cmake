# Install rules, the CMake package (gruxConfig.cmake: targets grux::grux and grux::tools),
# grux.pc for pkg-config, and the Debian packages (cpack -G DEB). Included by the top-level
# CMakeLists.txt when GRUX_INSTALL is on.
#
# Components: runtime (the shared libraries), dev (headers, static libraries or the .so links,
# the CMake package, grux.pc), tools (the grux command-line tool).
include(CMakePackageConfigHelpers)

set(GRUX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/grux)

set(GRUX_ENGINE_HEADERS
  include/grux/conv.h include/grux/cost.h include/grux/cost_format.h include/grux/cost_predict.h
  include/grux/cost_profile.h include/grux/cost_registry.h include/grux/error.h
  include/grux/export.h include/grux/gru.h include/grux/grux.h include/grux/io.h include/grux/lstm.h
  include/grux/mingru.h include/grux/model.h include/grux/nn.h include/grux/optim.h
  include/grux/precision.h
  include/grux/rearrange.h include/grux/runtime.h include/grux/scan.h include/grux/sequence.h
  include/grux/tensor.h include/grux/tensor_ops.h
  ${GRUX_GENERATED_INCLUDE}/grux/version.h)
install(FILES ${GRUX_ENGINE_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/grux COMPONENT dev)

set(GRUX_INSTALLED_TARGETS grux)
if(GRUX_BUILD_TOOLS)
  list(APPEND GRUX_INSTALLED_TARGETS grux_tools)
  install(FILES include/grux/calibrate.h include/grux/lm.h include/grux/sweep.h
                include/grux/train.h include/grux/dist.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/grux COMPONENT dev)
  install(TARGETS grux_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  # The CLI's data (the example model, the training text): PREFIX/share/grux.
  install(DIRECTORY data/ DESTINATION ${CMAKE_INSTALL_DATADIR}/grux COMPONENT tools)
endif()
install(TARGETS ${GRUX_INSTALLED_TARGETS} EXPORT gruxTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gruxTargets NAMESPACE grux:: DESTINATION ${GRUX_CMAKE_DIR} COMPONENT dev)

# What a static libgrux needs at the consumer's link step (a shared one carries its own).
if(BUILD_SHARED_LIBS)
  set(GRUX_STATIC_LIBS OFF)
else()
  set(GRUX_STATIC_LIBS ON)
endif()
if(GRUX_BUILD_TOOLS AND GRUX_WITH_MPI AND MPI_CXX_FOUND)
  set(GRUX_TOOLS_MPI ON)
else()
  set(GRUX_TOOLS_MPI OFF)
endif()
configure_package_config_file(cmake/gruxConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/gruxConfig.cmake INSTALL_DESTINATION ${GRUX_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gruxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gruxConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/gruxConfigVersion.cmake
        DESTINATION ${GRUX_CMAKE_DIR} COMPONENT dev)

# grux.pc finds its prefix relative to itself, so the installed tree may be moved.
file(RELATIVE_PATH GRUX_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" GRUX_PC_TO_PREFIX "${GRUX_PC_TO_PREFIX}")
configure_file(cmake/grux.pc.in ${CMAKE_CURRENT_BINARY_DIR}/grux.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/grux.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# Debian packages: libgrux<SOVERSION> (runtime), libgrux-dev, grux-tools. Build with
# BUILD_SHARED_LIBS=ON for a runtime package that holds the shared libraries.
set(GRUX_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(CPACK_PACKAGE_NAME grux)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The grux developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "The grux developers")
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libgrux_tools links libgrux from this build: dpkg-shlibdeps looks for it here.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_CURRENT_BINARY_DIR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libgrux${GRUX_SOVERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libgrux-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# The headers include nothing outside grux; a static build's consumers link these.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libhwy-dev, libfmt-dev, libonnx-dev, libprotobuf-dev, pkg-config")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME grux-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
# The peer that grux bench gemm and grux calibrate measure, loaded when installed.
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "libopenblas0-openmp")
set(CPACK_COMPONENTS_ALL runtime dev)
if(GRUX_BUILD_TOOLS)
  list(APPEND CPACK_COMPONENTS_ALL tools)
endif()
include(CPack)
cpack_add_component(runtime DISPLAY_NAME "grux shared libraries")
cpack_add_component(dev DISPLAY_NAME "grux development files" DEPENDS runtime)
cpack_add_component(tools DISPLAY_NAME "grux command-line tool")
