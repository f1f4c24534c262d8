from cpulab.cli.main import main

main()
