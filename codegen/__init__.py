"""codegen: from optimised IR to native code (layer 3; may import every other layer).

Today it holds the `egc` command line; fusion, lowering, memory planning and LLVM code
generation land with the codegen issue.
"""
