# -*- Python -*-
# lit configuration of flashc (a test-harness file: the product has no Python).

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "flashc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".flash", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.flashc_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "Inputs", "GPU"]

config.substitutions.append(("%examples", os.path.join(config.flashc_src_root, "examples")))

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.flashc_tools_dir, config.llvm_tools_dir]
tools = ["flashc-opt", "flashc", "flashc-tune", "flashc-fuzz"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# PTX is assembled with ptxas where the CUDA toolkit is installed.
if config.ptxas and os.path.exists(config.ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas))
