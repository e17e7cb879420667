from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class OipConan(ConanFile):
    name = "oip"
    version = "0.1.0"
    description = "An embeddable C++20 SDK for the Open Inference Protocol (KServe V2 / Triton)"
    license = "Apache-2.0"
    topics = ("inference", "kserve", "triton", "open-inference-protocol")
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False], "fPIC": [True, False], "with_xtensor": [True, False],
               "with_http": [True, False], "with_grpc": [True, False]}
    default_options = {"shared": False, "fPIC": True, "with_xtensor": True, "with_http": True,
                       "with_grpc": True}
    exports_sources = "CMakeLists.txt", "cmake/*", "include/*", "src/*", "proto/*", "LICENSE"

    # On Debian these resolve to the system packages through the profile's [platform_requires]
    # (conan/profiles/debian12); elsewhere, to Conan Center's.
    def requirements(self):
        self.requires("fmt/9.1.0")
        if self.options.with_xtensor:
            self.requires("xtensor/0.24.3", transitive_headers=True)

    def config_options(self):
        if self.settings.os == "Windows":
            del self.options.fPIC

    def configure(self):
        if self.options.shared:
            self.options.rm_safe("fPIC")

    def validate(self):
        check_min_cppstd(self, 20)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables["OIP_BUILD_TESTS"] = False
        toolchain.cache_variables["OIP_BUILD_BENCHMARKS"] = False
        toolchain.cache_variables["OIP_BUILD_EXAMPLES"] = False
        toolchain.cache_variables["OIP_WITH_XTENSOR"] = bool(self.options.with_xtensor)
        # Boost.Beast is header-only: the oip::http component builds against Debian's
        # libboost1.81-dev, found by its own CMake config.
        toolchain.cache_variables["OIP_WITH_HTTP"] = bool(self.options.with_http)
        # grpc++ and protobuf likewise come from Debian (libgrpc++-dev, protobuf-compiler-grpc),
        # found by their own CMake config and module.
        toolchain.cache_variables["OIP_WITH_GRPC"] = bool(self.options.with_grpc)
        # The CUDA toolkit is not a Debian or Conan Center package here: the recipe leaves oip::cuda
        # out (build it with CMake where nvcc is).
        toolchain.cache_variables["OIP_WITH_CUDA"] = False
        toolchain.cache_variables["OIP_REQUIRE_ALL_COMPONENTS"] = True
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()

    def _is_conan_package(self, name):
        # dependencies.host leaves out [platform_requires] packages, which have no cpp_info.
        return any(dep.ref.name == name for dep in self.dependencies.host.values())

    def package_info(self):
        # The same file, target and component names as the CMake package config.
        self.cpp_info.set_property("cmake_file_name", "oip")
        self.cpp_info.set_property("pkg_config_name", "oip")

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "oip::oip")
        core.libs = ["oip"]
        if self._is_conan_package("fmt"):
            core.requires = ["fmt::fmt"]
        if not self.options.shared:
            # The static library's users link its private dependencies: Debian's libfmt-dev
            # (unless fmt came from Conan), libsimdjson-dev and zlib.
            if not self._is_conan_package("fmt"):
                core.system_libs.append("fmt")
            core.system_libs += ["simdjson", "z", "pthread"]
            core.defines = ["OIP_STATIC_DEFINE"]

        if self.options.with_xtensor:
            xtensor = self.cpp_info.components["xtensor"]
            xtensor.set_property("cmake_target_name", "oip::xtensor")
            # A platform (Debian) xtensor is header-only in /usr/include: nothing to link.
            xtensor.requires = ["core"] + (
                ["xtensor::xtensor"] if self._is_conan_package("xtensor") else [])
            xtensor.libdirs = []
            xtensor.bindirs = []

        if self.options.with_http:
            http = self.cpp_info.components["http"]
            http.set_property("cmake_target_name", "oip::http")
            http.libs = ["oip_http"]
            http.requires = ["core"]

        if self.options.with_grpc:
            grpc = self.cpp_info.components["grpc"]
            grpc.set_property("cmake_target_name", "oip::grpc")
            grpc.libs = ["oip_grpc"]
            grpc.requires = ["core"]
            # grpc++'s headers inline calls into abseil's Mutex.
            grpc.system_libs = ["grpc++", "grpc", "gpr", "protobuf", "absl_synchronization"]
