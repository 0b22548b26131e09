package redlock

func init() {
	ScriptHashes["multi-acquire"] = multiAcquireScript.Hash()
	ScriptHashes["multi-release"] = multiReleaseScript.Hash()
	ScriptHashes["multi-extend"] = multiExtendScript.Hash()
	ScriptHashes["multi-fence"] = multiFenceScript.Hash()
}
