import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class OipTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables["OIP_TEST_XTENSOR"] = bool(
            self.dependencies["oip"].options.with_xtensor)
        toolchain.cache_variables["OIP_TEST_HTTP"] = bool(
            self.dependencies["oip"].options.with_http)
        toolchain.cache_variables["OIP_TEST_GRPC"] = bool(
            self.dependencies["oip"].options.with_grpc)
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            if self.dependencies["oip"].options.with_xtensor:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_xtensor"),
                         env="conanrun")
            if self.dependencies["oip"].options.with_http:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_http"), env="conanrun")
            if self.dependencies["oip"].options.with_grpc:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_grpc"), env="conanrun")
